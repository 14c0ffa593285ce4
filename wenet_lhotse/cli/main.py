"""The ``wenet-lhotse`` command group; subcommands live in sibling modules.

Errors: every command reports bad data, bad config, bad usage and missing or unreadable
files as one line ``error: ...`` on stderr and exits non-zero (1; 2 for usage errors),
never with a traceback (``-vv`` prints it too, to show where an error came from).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import traceback
from typing import Any, Callable, Optional, Tuple

import click

#: Exceptions that are the user's input, not our bug: shown as ``error: <message>``.
#: WenetDataError and WenetConfigError are ValueErrors.
_INPUT_ERRORS = (ValueError, OSError, EOFError, UnicodeDecodeError)


class CliError(click.ClickException):
    """A failed command: printed as one line ``error: <message>``, exit status 1."""

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


def input_error_message(err: BaseException) -> str:
    """One line for an input error: the file name and the reason for OS errors, the
    message (which names file and line, or the yaml key) for our own errors."""
    if isinstance(err, OSError) and getattr(err, "filename", None):
        reason = err.strerror or type(err).__name__
        return f"{err.filename}: {reason}"
    if isinstance(err, EOFError):
        return f"input ended too early (truncated file?): {err}"
    msg = str(err).strip() or type(err).__name__
    return " ".join(msg.splitlines())


class WenetGroup(click.Group):
    """A click group that turns input errors raised by any subcommand into
    :class:`CliError` (one line, no traceback)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as err:
            if err.ctx is not None and err.ctx.command is not None:
                hint = f" (see '{err.ctx.command_path} --help')"
            else:
                hint = ""
            click.echo(f"error: {err.format_message()}{hint}", err=True)
            ctx.exit(err.exit_code)
        except CliError:
            raise
        except click.ClickException as err:  # commands' own messages: same format
            raise CliError(" ".join(err.format_message().split("\n"))) from None
        except _INPUT_ERRORS as err:
            if ctx.obj and ctx.obj.get("verbose", 0) >= 2:
                traceback.print_exc()
            raise CliError(input_error_message(err)) from None


def refuse_output_is_input(out, *inputs, option: str = "-o") -> None:
    """The one check of every command's output option: a ``click.UsageError`` (one
    line) when ``out`` has a control character, names one of ``inputs`` (links resolved;
    None entries ignored), which writing would overwrite (``cmvn``, ``make-units`` and
    ``make-list`` did), or lies inside an input directory (a Shar directory):
    :func:`~wenet_lhotse.io.outputs.refuse_clobber`."""
    from wenet_lhotse.io.outputs import OutputClobbersInput, refuse_clobber

    try:
        refuse_clobber(out, inputs, option=option)
    except OutputClobbersInput as err:
        raise click.UsageError(str(err)) from None


#: ``--allow-pipe``: every command that reads inputs takes it (:func:`policy_options`).
ALLOW_PIPE_HELP = ("Run the shell commands of 'pipe:CMD' lines in shard lists (and 'command' "
                   "audio sources of manifests). Without it they are refused: data never runs "
                   "a command unless you allow it.")


def policy_options(skip_errors: Optional[Tuple[str, str]] = None, *, strict: bool = True,
                   pipe: bool = True) -> Callable[[Callable], Callable]:
    """The ONE way a command gets its :class:`~wenet_lhotse.io.policy.ReadPolicy`: a
    decorator adding ``--allow-pipe`` (``pipe``: run the shell commands the data names)
    and, with ``skip_errors=(flag, help)``, a flag such as ``--skip-errors`` or
    ``--fault-tolerant`` (skip bad items, named and counted in the policy's
    ``skip_report``, instead of stopping at the first, as WeNet does; ``strict=False``:
    the command always skips). The command receives a ready ``policy`` argument
    instead of the flags. URL protocols, the member cap and network limits come from
    the environment."""
    skip_name = skip_errors[0].lstrip("-").replace("-", "_") if skip_errors else None

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def with_policy(*args: Any, **kwargs: Any) -> Any:
            from wenet_lhotse.io.policy import ReadPolicy

            skip = bool(kwargs.pop(skip_name)) if skip_name else False
            policy = ReadPolicy(strict=strict and not skip,
                                allow_pipe=bool(kwargs.pop("allow_pipe", False)))
            return command(*args, policy=policy, **kwargs)

        if pipe:
            with_policy = click.option("--allow-pipe", is_flag=True,
                                       help=ALLOW_PIPE_HELP)(with_policy)
        if skip_errors:
            with_policy = click.option(skip_errors[0], is_flag=True,
                                       help=skip_errors[1])(with_policy)
        return with_policy

    return decorate


def show_progress() -> bool:
    """Whether commands draw tqdm progress bars: only when stderr is a terminal (in a
    log file or a pipe, each redraw would be one more line). The one place that decides."""
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


_cli_pid = -1  # the process whose SIGTERM handler main() installed


def _exit_on_sigterm(signum, frame) -> None:
    # SystemExit unwinds the stack: atomic writers remove their temporary files and
    # process pools end their workers (io.parallel) before the process exits. A process
    # forked from this one that still has the handler (SIGTERM to the whole group right
    # after a fork) exits at once: a fork never returns into its parent's code.
    if os.getpid() != _cli_pid:
        os._exit(128 + signum)
    raise SystemExit(128 + signum)


def _own_sigterm(ctx: click.Context) -> None:
    """Turn SIGTERM into ``SystemExit`` for the command (cleanup runs), only where
    nobody else claimed the signal (its handler is the default): a host process --
    a test session running commands in-process, a user's script -- keeps its own, and
    the previous handler is back when the command ends (issue 30: a handler left in a
    pytest process turned ``timeout``'s SIGTERM into a test failure)."""
    global _cli_pid
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        return
    _cli_pid = os.getpid()
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))


def _version_message() -> str:
    """``wenet-lhotse, version X (lhotse Y, torch Z, python V)``: the installed
    distribution's version (importlib.metadata), or the package's own when run from a
    clone that is not installed; the versions next to it are what bug reports need."""
    import sys
    from importlib import metadata

    import wenet_lhotse

    def dist_version(name: str, default: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return default

    own = dist_version("wenet-lhotse", wenet_lhotse.__version__)
    deps = ", ".join(f"{name} {dist_version(name, 'missing')}" for name in ("lhotse", "torch"))
    return f"wenet-lhotse, version {own} ({deps}, python {sys.version.split()[0]})"


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(_version_message())
        ctx.exit()


@click.group(cls=WenetGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")
@click.option("-v", "--verbose", count=True,
              help="More log output (-v info, -vv debug, and tracebacks for errors).")
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """WeNet data on Lhotse: import/export WeNet data.list and tar shards, check
    and describe data, and train WeNet models with Lhotse's samplers.

    \b
    Typical first steps:
      wenet-lhotse demo --quick              # the whole flow on generated data
      wenet-lhotse corpus demo_data          # make a small WeNet-format corpus
      wenet-lhotse validate demo_data/data.list
      wenet-lhotse import demo_data/data.list -o demo_data/cuts.jsonl.gz
      wenet-lhotse bench --data demo_data/cuts.jsonl.gz --units demo_data/units.txt

    Run 'wenet-lhotse COMMAND --help' for each command's options.
    """
    ctx.ensure_object(dict)["verbose"] = verbose
    _own_sigterm(ctx)
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=max(level, logging.DEBUG),
                        format="%(levelname)s %(name)s: %(message)s")
