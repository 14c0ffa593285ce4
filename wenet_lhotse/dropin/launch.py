"""Run one of WeNet's scripts (``wenet.bin.train``, ``wenet.bin.recognize``) as
``__main__`` after patching WeNet, with one-line errors, also under ``torchrun``.

The contract (used by :mod:`wenet_lhotse.dropin.train` and :mod:`wenet_lhotse.dropin.recognize`):

1. WeNet and the script are imported inside :func:`wenet_lhotse.dropin.shims.stand_ins`, so
   packages WeNet imports at module level but never calls with the drop-in serving data
   (torchaudio, deepspeed) need not be installed. The stand-ins leave ``sys.modules`` before
   the script runs; the first call of the patched loader logs, in one line, what was stood
   in (after WeNet's own ``logging.basicConfig``, so in WeNet's format).
2. A module WeNet imports that is missing gives one line with the real cause and what to
   install (``WeNet (wenet/utils/init_model.py) needs 'librosa', which is not installed:
   pip install librosa ...``); no WeNet on the path gives the line saying how to add it.
3. Our own errors raised while the script runs -- a bad yaml key or value
   (:class:`~wenet_lhotse.errors.WenetConfigError`), bad or missing data
   (:class:`~wenet_lhotse.errors.WenetDataError`, ``FileNotFoundError``), a stood-in
   function called (:class:`~wenet_lhotse.dropin.shims.MissingDependency`) -- print one line
   on stderr (``error: <rank N: >message``) and exit with status 1. Under ``torchrun``, WeNet's
   ``@record`` has already written the traceback to torch elastic's error file; the file is
   removed so that torchrun's failure summary does not print it again (torchrun still prints
   its own summary naming the failed rank). A DataLoader worker killed from outside (torch's
   ``DataLoader worker (pid N) is killed by signal: Killed.``, typically the out-of-memory
   killer) is one line too, saying it is not a data error (issue 23), never after a
   traceback (torch may raise it inside a finalizer, where Python would print one: see
   :func:`_quiet_worker_death`). Any other exception
   keeps its traceback: it is a bug, not a user error.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import os
import runpy
import sys
import traceback
from typing import Any, Callable, Iterator, List, NoReturn, Optional

from wenet_lhotse.dropin.shims import MissingDependency, stand_ins
from wenet_lhotse.errors import WenetDataError, is_worker_death

#: the errors printed as one line (everything else keeps its traceback)
USER_ERRORS = (WenetDataError, MissingDependency, FileNotFoundError)

#: what to install for modules WeNet imports, where the package name differs
PIP_NAMES = {"whisper": "openai-whisper", "yaml": "pyyaml", "sentencepiece": "sentencepiece"}

WENET_MISSING = ("WeNet is not importable: put a WeNet checkout on PYTHONPATH "
                 "(export PYTHONPATH=/path/to/wenet:$PYTHONPATH)")


def _installed_package(err: BaseException) -> str:
    """The installed package in whose code ``err`` was raised (innermost frame under
    site-packages / dist-packages), else ''."""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        path = frame.filename.replace(os.sep, "/")
        for root in ("/site-packages/", "/dist-packages/"):
            if root in path:
                return path.split(root, 1)[1].split("/")[0].removesuffix(".py")
    return ""


def missing_module_message(err: BaseException) -> str:
    """One line for an error met while importing WeNet: no WeNet at all, the module WeNet
    needs (and which WeNet file imports it) with what to install, or an installed package
    that does not load (an OSError from a binary built for another torch)."""
    name = getattr(err, "name", None) or ""
    if name == "wenet":
        return WENET_MISSING
    if name.split(".")[0] == "wenet" and isinstance(err, ModuleNotFoundError):
        return WENET_MISSING.replace(":", f" ({str(err).strip()}):", 1)
    where = ""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        path = frame.filename.replace(os.sep, "/")
        if "/wenet/" in path:
            where = f" ({path[path.rindex('/wenet/') + 1:]}:{frame.lineno})"
            break
    if not isinstance(err, ModuleNotFoundError) or not name:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        package = _installed_package(err) if not isinstance(err, ImportError) else ""
        hint = (f" (the installed {package} does not load: reinstall it for this torch, "
                f"or uninstall it)") if package else ""
        return f"WeNet{where} does not import: {type(err).__name__}: {first}{hint}"
    top = name.split(".")[0]
    pip = PIP_NAMES.get(top, top)
    return (f"WeNet{where} needs {top!r}, which is not installed: pip install {pip} "
            "(or, in the wenet-lhotse clone, pip install -e \".[wenet]\" for all of WeNet's "
            "dependencies)")


def _rank_prefix() -> str:
    world = os.environ.get("WORLD_SIZE")
    return f"rank {os.environ.get('RANK', '0')}: " if world and world != "1" else ""


def fail(message: str) -> NoReturn:
    """Print ``error: <rank N: >message`` on stderr as one line and exit with status 1;
    drop the traceback torch elastic's ``@record`` wrote for torchrun's summary."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file and os.path.isfile(error_file):
        try:
            os.remove(error_file)
        except OSError:  # pragma: no cover - torchrun then prints the traceback
            pass
    line = " ".join(str(message).split("\n")[0].split())
    # one write(2) of the whole line: ranks share torchrun's stderr, and print() may
    # write the text and its newline apart, interleaving two ranks' lines
    text = f"error: {_rank_prefix()}{line}\n"
    sys.stderr.flush()
    try:
        os.write(sys.stderr.fileno(), text.encode(errors="replace"))
    except (AttributeError, OSError, ValueError):  # stderr replaced (no file descriptor)
        sys.stderr.write(text)
        sys.stderr.flush()
    sys.exit(1)


def import_wenet_module(name: str) -> Any:
    """``importlib.import_module(name)`` for a WeNet module, the missing-package stand-ins
    in place while it imports; an ImportError with :func:`missing_module_message`."""
    try:
        with stand_ins() as installed, _popen_read_to_end():
            module = importlib.import_module(name)
    except (ImportError, OSError) as e:  # OSError: a binary package that does not load
        raise ImportError(missing_module_message(e)) from e
    _STOOD_IN.extend(x for x in installed if x not in _STOOD_IN)
    return module


@contextlib.contextmanager
def _popen_read_to_end() -> Iterator[None]:
    """While WeNet imports, ``os.popen(cmd)`` (read mode) runs ``cmd`` to its end and
    returns its output as a closed-over string buffer. WeNet's ``dataset/processor.py``
    reads ``os.popen("lscpu | grep 'Vendor ID'")`` at import and never closes it: the
    pipe stayed open to the end of every run, which printed ``ResourceWarning: unclosed
    file <_io.TextIOWrapper name=3 ...>`` per process at exit."""
    popen = os.popen

    def read_to_end(cmd: str, mode: str = "r", buffering: int = -1) -> Any:
        if mode != "r":
            return popen(cmd, mode, buffering)
        import subprocess

        done = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, text=True,
                              check=False)
        return io.StringIO(done.stdout)

    os.popen = read_to_end
    try:
        yield
    finally:
        os.popen = popen


#: what :func:`import_wenet_module` stood in, in this process
_STOOD_IN: List[str] = []


def log_stand_ins_once(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` that logs, at its first call, the one line saying what was stood in."""
    done: List[bool] = []

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            if _STOOD_IN:
                import logging

                logging.getLogger("wenet_lhotse.dropin.launch").info(
                    "wenet-lhotse stood in for what WeNet imports but does not call here: %s",
                    ", ".join(_STOOD_IN))
        return func(*args, **kwargs)

    return wrapper


def run_patched(patch: Callable[[], None], module: str, argv: Optional[List[str]]) -> None:
    """``patch()`` WeNet, import ``module`` (so every WeNet import happens with the
    stand-ins in place), then run it as ``__main__`` with ``argv`` (default: this process's
    own arguments). Our errors end the process with one line (see the module docstring)."""
    try:
        patch()
        import_wenet_module(module)
    except ImportError as e:
        fail(str(e))
    # run it fresh as __main__ (its imports resolve from sys.modules)
    sys.modules.pop(module, None)
    if argv is not None:
        sys.argv = [module] + list(argv)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_quiet_worker_death, previous_hook)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except USER_ERRORS as e:
        fail(str(e) if not isinstance(e, FileNotFoundError) else
             f"{e.strerror or 'No such file or directory'}: {e.filename}"
             f"{yaml_key_hint(e.filename, sys.argv)}")
    except ImportError as e:  # a module WeNet imports inside a function
        fail(missing_module_message(e))
    except RuntimeError as e:
        if not is_worker_death(e):
            raise
        fail(worker_death_message(_DEATHS[0] if _DEATHS else e))
    finally:
        sys.unraisablehook = previous_hook


#: worker deaths raised where Python could only print them (see _quiet_worker_death)
_DEATHS: List[BaseException] = []


def _quiet_worker_death(previous: Callable[[Any], None], args: Any) -> None:
    """``sys.unraisablehook`` while a script runs: torch's SIGCHLD handler raises its
    killed-worker error inside whatever runs at that moment -- a weakref finalizer, a
    ``__del__`` -- where Python prints it with a traceback and goes on (issue 30). Such
    an error is kept, not printed: the loader raises the death again in the loop (or
    as "exited unexpectedly"), and :func:`run_patched` reports it in its one line with
    the signal kept here. Anything else goes to the previous hook."""
    if args.exc_value is not None and is_worker_death(args.exc_value):
        _DEATHS.append(args.exc_value)
        return
    previous(args)


def yaml_key_hint(filename: Any, argv: List[str]) -> str:
    """`` (tokenizer_conf.symbol_table_path in conf/train.yaml)`` when the missing file is
    a value of the ``--config`` yaml (WeNet opens its units, CMVN and BPE files by the
    yaml's paths, relative to the working directory), else ''."""
    config = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--config"), None)
    config = config or next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")),
                            None)
    if not config or filename is None:
        return ""
    try:
        import yaml

        with open(config, encoding="utf-8") as f:
            conf = yaml.safe_load(f)
    except Exception:  # noqa: BLE001 - a hint only: the error itself is the line
        return ""

    def walk(node: Any, path: str) -> Optional[str]:
        if isinstance(node, dict):
            for k, v in node.items():
                found = walk(v, f"{path}.{k}" if path else str(k))
                if found:
                    return found
        elif isinstance(node, str) and node and os.path.normpath(node) == \
                os.path.normpath(os.fspath(filename)):
            return path
        return None

    key = walk(conf, "")
    return f" ({key} in {config})" if key else ""


def worker_death_message(err: BaseException) -> str:
    """torch's killed-worker error as our one line: its own first line (the pid and the
    signal), and what it is not."""
    first = " ".join(str(err).strip().split("\n")[0].split())
    return (f"{first} (killed from outside the loader -- the out-of-memory killer? see "
            "dmesg; not a data error)")
