"""The package as a user gets it: ``python -m build``'s wheel and sdist, installed from the
wheel into a fresh virtual environment (``python -m venv``, nothing from this checkout or
this machine's site-packages visible), then WeNet's own ``train.py`` through the launcher.

* the wheel and the sdist hold every file of the package (package data included), their
  metadata carry the package's ``__version__``, and every requirement has a floor;
* in the fresh venv: ``pip check`` passes with the dependencies read from the wheel's own
  metadata, ``wenet-lhotse --version`` prints the installed version, ``wenet_lhotse`` is
  the installed copy, and neither torchaudio nor deepspeed is installed;
* ``python -m wenet_lhotse.dropin.train`` under ``torchrun`` trains WeNet's tiny conformer
  one epoch on 2 gloo ranks with only ``$WENET_ROOT`` on PYTHONPATH (no stand-ins), and a
  typo in the yaml gives one ``error:`` line naming the key, no traceback.

The venv's dependencies take minutes to install (torch from the local wheel, the rest
from the package index), so the venv is cached in the temporary directory under a key of
the Python version and the wheel's requirement lines: a later session with the same
requirements reinstalls only the wheel (``--no-deps``, seconds).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

import wenet_lhotse

ROOT = Path(__file__).resolve().parents[1]
#: the torch the venv gets (a local CPU wheel on our machines; any torch >= 2.1 works)
TORCH = "torch==2.13.0"
EXTRA = "wenet"
#: seconds for a test that may create the venv (a cold install: ~3.5 min on an idle
#: 2-core machine, over 10 min under load; later sessions reuse it)
VENV_TIMEOUT = 1800


def _run(cmd: List[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True,
                          **kw)


def _ok(res: subprocess.CompletedProcess, what: str) -> None:
    assert res.returncode == 0, f"{what} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"


@contextlib.contextmanager
def _exclusive(name: str):
    """An exclusive ``flock`` on ``<tmp>/<name>.lock`` while the block runs. The build
    writes ``wenet_lhotse.egg-info`` into the checkout, and the cached venv is shared by
    every checkout on the machine: two pytest processes (pytest-xdist workers, or two
    clones' suites) must not build at once, nor reinstall the wheel into the venv while
    the other's tests use it (they would test the other's wheel)."""
    with open(Path(tempfile.gettempdir()) / f"{name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file is closed
        yield


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Dict[str, Path]:
    """``python -m build``'s wheel and sdist of this checkout."""
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:16]
    with _exclusive(f"wenet-lhotse-build-{checkout}"):
        res = _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                   env=env, timeout=600)
    _ok(res, "python -m build")
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


def _package_files() -> List[str]:
    """The package's files as git tracks them (``.py`` and package data)."""
    res = _run(["git", "ls-files", "wenet_lhotse"], cwd=ROOT)
    if res.returncode != 0:
        pytest.skip("not a git checkout")
    return [f for f in res.stdout.split() if (ROOT / f).is_file()]


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name).decode("utf-8")


def _requirements(metadata: str, extra: str) -> List[str]:
    """The wheel's ``Requires-Dist`` lines: the core ones and those of ``extra``."""
    out = []
    for req in re.findall(r"^Requires-Dist: (.+)$", metadata, re.M):
        spec, _, marker = req.partition(";")
        if not marker.strip() or re.fullmatch(rf"\s*extra\s*==\s*['\"]{extra}['\"]\s*",
                                              marker):
            out.append(spec.strip())
    return out


@pytest.mark.slow
def test_wheel_and_sdist_hold_the_package(dist):
    files = _package_files()
    assert any(f.endswith("py.typed") for f in files)
    with zipfile.ZipFile(dist["wheel"]) as zf:
        in_wheel = set(zf.namelist())
    missing = [f for f in files if f not in in_wheel]
    assert not missing, f"not in the wheel: {missing}"
    with tarfile.open(dist["sdist"]) as tf:
        in_sdist = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    missing = [f for f in files + ["pyproject.toml", "README.md"] if f not in in_sdist]
    assert not missing, f"not in the sdist: {missing}"

    meta = _metadata(dist["wheel"])
    assert re.search(rf"^Version: {re.escape(wenet_lhotse.__version__)}$", meta, re.M)
    assert "wenet-lhotse = wenet_lhotse.cli:main" in zipfile.ZipFile(dist["wheel"]).read(
        next(n for n in zipfile.ZipFile(dist["wheel"]).namelist()
             if n.endswith("entry_points.txt"))).decode()
    # every requirement, core and extras, has a lower bound: without one pip may
    # backtrack to an ancient release (s3fs 0.4.2 next to a current boto3)
    reqs = re.findall(r"^Requires-Dist: ([^;]+)", meta, re.M)
    assert len(reqs) > 10
    no_floor = [r for r in reqs if not re.search(r"(>=|==|~=)", r)]
    assert not no_floor, f"requirements without a floor: {no_floor}"
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", meta, re.M))
    assert {"wenet", "s3", "cluster", "slurm", "test"} <= extras
    assert any(r.startswith("dask-jobqueue") for r in _requirements(meta, "slurm"))


@pytest.fixture(scope="module")
def venv(dist) -> Iterator[Path]:
    """A fresh venv with the wheel and its ``wenet`` extra installed (cached, see the
    module docstring), held exclusively by this process until the module's tests end
    (:func:`_exclusive`)."""
    reqs = _requirements(_metadata(dist["wheel"]), EXTRA)
    key = hashlib.sha256("\n".join([sys.version, TORCH, *sorted(reqs)]).encode()
                         ).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"wenet-lhotse-wheel-venv-{key}"
    python = path / "bin" / "python"
    ready = path / "deps-installed"
    env = _clean_env()
    with _exclusive(path.name):
        if not ready.exists():
            shutil.rmtree(path, ignore_errors=True)
            _ok(_run([sys.executable, "-m", "venv", str(path)], env=env, timeout=300),
                "python -m venv")
            # the dependencies exactly as the wheel's metadata lists them (+ the torch
            # pin) (--no-compile: byte-compiling all of torch is minutes on 2 cores)
            _ok(_run([str(python), "-m", "pip", "install", "-q", "--no-compile", TORCH,
                      *reqs], env=env, timeout=1200),
                "pip install (the wheel's requirements)")
            ready.write_text("\n".join(reqs) + "\n", encoding="utf-8")
        _ok(_run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                  "--no-compile", str(dist["wheel"])], env=env, timeout=300),
            "pip install the wheel")
        yield path


def _clean_env(**extra: str) -> Dict[str, str]:
    """The environment without this checkout (or any stand-in) on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def _venv_env(venv: Path, **extra: str) -> Dict[str, str]:
    env = _clean_env(**extra)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


@pytest.mark.slow
@pytest.mark.timeout(VENV_TIMEOUT)
def test_wheel_installs_in_a_fresh_venv(venv, tmp_path):
    env = _venv_env(venv)
    python = str(venv / "bin" / "python")
    _ok(_run([python, "-m", "pip", "check"], env=env, cwd=tmp_path), "pip check")

    res = _run([str(venv / "bin" / "wenet-lhotse"), "--version"], env=env, cwd=tmp_path)
    _ok(res, "wenet-lhotse --version")
    assert res.stdout.startswith(f"wenet-lhotse, version {wenet_lhotse.__version__} ("), \
        res.stdout
    assert "torch 2.13.0" in res.stdout

    probe = ("import importlib.util as u, wenet_lhotse; "
             "print(wenet_lhotse.__file__); print(wenet_lhotse.__version__); "
             "print(u.find_spec('torchaudio'), u.find_spec('deepspeed'))")
    res = _run([python, "-c", probe], env=env, cwd=tmp_path)
    _ok(res, "import wenet_lhotse in the venv")
    where, version, specs = res.stdout.splitlines()
    assert Path(where).resolve().is_relative_to(venv.resolve()), where
    assert version == wenet_lhotse.__version__
    assert specs == "None None", "the venv must have neither torchaudio nor deepspeed"

    # the CLI works from the installed copy: a corpus, then validate it
    res = _run(["wenet-lhotse", "corpus", "c", "-n", "4"], env=env, cwd=tmp_path)
    _ok(res, "wenet-lhotse corpus")
    _ok(_run(["wenet-lhotse", "validate", "c/data.list"], env=env, cwd=tmp_path),
        "wenet-lhotse validate")


@pytest.fixture(scope="module")
def train_data(tmp_path_factory, wenet_root):
    """40 short utterances (4 speakers), a speaker table and WeNet's tiny conformer yaml
    (one epoch)."""
    from wenet_harness.runs import speaker_table, write_config
    from wenet_lhotse.corpus import generate_corpus

    root = tmp_path_factory.mktemp("wheel_train")
    corpus = generate_corpus(root / "corpus", num_utterances=40, min_duration=0.8,
                             max_duration=1.6, seed=3)
    spk = speaker_table(corpus.data_list, root / "spk.txt")
    return root, corpus, spk, write_config


def _train_cmd(venv: Path, config: Path, corpus, model_dir: Path, nproc: int,
               env: Dict[str, str]) -> List[str]:
    """WeNet's train.py through the launcher: under torchrun for ``nproc > 1``, else as
    one process with the variables torchrun would set (added to ``env``)."""
    from wenet_harness.runs import free_port

    python = str(venv / "bin" / "python")
    port = str(free_port())
    if nproc > 1:
        launcher = [python, "-m", "torch.distributed.run", "--nnodes=1",
                    f"--nproc_per_node={nproc}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint=127.0.0.1:{port}"]
    else:
        launcher = [python]
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    return [*launcher, "-m", "wenet_lhotse.dropin.train", "--config", str(config),
            "--data_type", "raw", "--train_data", str(corpus.data_list),
            "--cv_data", str(corpus.data_list), "--model_dir", str(model_dir),
            "--tensorboard_dir", str(model_dir / "tb"), "--device", "cpu",
            "--ddp.dist_backend", "gloo", "--num_workers", "1", "--prefetch", "2"]


@pytest.mark.slow
@pytest.mark.timeout(VENV_TIMEOUT)
def test_wenet_train_from_the_wheel_two_ranks_without_stand_ins(venv, train_data, wenet_root):
    """Needs the launcher's in-package stand-ins for torchaudio/deepspeed (issue 21)."""
    root, corpus, spk, write_config = train_data
    config = write_config(root / "train.yaml", corpus.units, spk, max_epoch=1)
    model_dir = root / "exp"
    model_dir.mkdir()
    env = _venv_env(venv, PYTHONPATH=str(wenet_root))
    res = _run(_train_cmd(venv, config, corpus, model_dir, 2, env), env=env, cwd=model_dir,
               timeout=900)
    _ok(res, "dropin.train from the wheel (2 gloo ranks)")
    assert (model_dir / "epoch_0.pt").is_file(), sorted(p.name for p in model_dir.iterdir())
    assert not (model_dir / "epoch_1.pt").exists()
    assert "Traceback" not in res.stderr


@pytest.mark.slow
@pytest.mark.timeout(VENV_TIMEOUT)
@pytest.mark.parametrize("nproc", [1, 2])
def test_yaml_typo_is_one_line_from_the_wheel(venv, train_data, wenet_root, nproc):
    """A misspelt ``dataset_conf`` key: one ``error:`` line per rank naming the key (next
    to WeNet's own log lines), no traceback of WeNet's or ours."""
    root, corpus, spk, write_config = train_data
    config = write_config(root / f"typo{nproc}.yaml", corpus.units, spk,
                          {"shufle": True}, max_epoch=1)
    model_dir = root / f"typo{nproc}"
    model_dir.mkdir()
    env = _venv_env(venv, PYTHONPATH=str(wenet_root))
    res = _run(_train_cmd(venv, config, corpus, model_dir, nproc, env), env=env,
               cwd=model_dir, timeout=600)
    assert res.returncode != 0
    # no traceback from WeNet's train.py or from us; under torchrun, torchrun's agent
    # still prints its own failure summary (ChildFailedError, torch/distributed/run.py)
    frames = [line for line in res.stderr.splitlines() if line.strip().startswith("File ")]
    ours = [f for f in frames if "/wenet/" in f or "/wenet_lhotse/" in f]
    assert not ours, res.stderr[-3000:]
    if nproc == 1:
        assert "Traceback" not in res.stderr, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == nproc, res.stderr[-3000:]
    assert all("dataset_conf.shufle" in line for line in errors), errors



def test_version_option():
    """``wenet-lhotse --version``: the package's version and what bug reports need."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = _run([sys.executable, "-m", "wenet_lhotse", "--version"], env=env)
    _ok(res, "wenet-lhotse --version")
    assert re.fullmatch(r"wenet-lhotse, version \S+ \(lhotse 1\.33\.\S+, torch \S+, "
                        r"python 3\.\S+\)\n", res.stdout), res.stdout
