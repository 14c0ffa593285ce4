# Minimal `--name value` option parser in the style of Kaldi/WeNet's parse_options.sh:
# every `--foo_bar VALUE` (or `--foo-bar VALUE`) sets the shell variable foo_bar, which
# must already exist. Source it after the defaults.
while [ $# -gt 0 ]; do
  case "$1" in
    --*)
      name=$(echo "${1#--}" | tr '-' '_')
      if ! declare -p "$name" >/dev/null 2>&1; then
        echo "$0: unknown option $1" >&2; exit 1
      fi
      [ $# -ge 2 ] || { echo "$0: option $1 needs a value" >&2; exit 1; }
      printf -v "$name" '%s' "$2"; shift 2 ;;
    *) echo "$0: unexpected argument $1" >&2; exit 1 ;;
  esac
done
