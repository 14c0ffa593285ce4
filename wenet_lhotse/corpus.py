"""A synthetic WeNet-format corpus that the package generates itself (no downloads).

Each character of the transcript is rendered as a short harmonic "syllable"
whose pitch and formants identify the character, with silence for spaces,
a little noise and a random speaking rate. A small CTC model learns it in
minutes on a CPU, so the demo's loss visibly falls, and the audio has the
statistics (durations, silence, 16-bit PCM) the data pipeline cares about.

Layout written by :func:`generate_corpus` under ``out_dir``::

    wav/<key>.wav            16-bit PCM audio
    data.list                WeNet raw list: {"key", "wav", "txt", ...} per line
    text, wav.scp            Kaldi-style files, as WeNet's data prep leaves them
    units.txt                WeNet char symbol table (<blank> 0, <unk> 1, <sos/eos> 2, ...)
    shards/shards_*.tar      WeNet shards (when ``shard_size`` is set)
    shards.list              one tar path per line (when ``shard_size`` is set)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np
from lhotse.utils import Pathlike

logger = logging.getLogger(__name__)


#: The alphabet of the synthetic language. Spaces separate words.
ALPHABET = "abcdefghijklmnop"

# Durations (seconds) per rendered unit; the speaking rate scales both.
_CHAR_SECONDS = 0.12
_SPACE_SECONDS = 0.06


@dataclass
class CorpusPaths:
    """Where :func:`generate_corpus` put things. ``shards_list`` is None without shards."""

    root: Path
    data_list: Path
    text: Path
    wav_scp: Path
    units: Path
    shards_list: Optional[Path]
    keys: List[str]
    total_duration: float  # seconds


def _char_params(ch: str) -> tuple:
    """Pitch (Hz) and two formant centres (Hz) that identify a character."""
    i = ALPHABET.index(ch)
    f0 = 110.0 + 15.0 * (i % 4)
    f1 = 300.0 + 110.0 * (i // 4) * 2
    f2 = 1000.0 + 250.0 * (i % 4) + 90.0 * (i // 4)
    return f0, f1, f2


def synthesize(text: str, sampling_rate: int, rng: np.random.Generator,
               rate: float = 1.0) -> np.ndarray:
    """Render ``text`` (characters of :data:`ALPHABET` and spaces) to float32 samples in [-1, 1]."""
    pieces = [np.zeros(int(0.15 * sampling_rate), dtype=np.float32)]
    for ch in text:
        if ch == " ":
            pieces.append(np.zeros(int(_SPACE_SECONDS * rate * sampling_rate), dtype=np.float32))
            continue
        f0, f1, f2 = _char_params(ch)
        n = int(_CHAR_SECONDS * rate * sampling_rate * rng.uniform(0.85, 1.15))
        t = np.arange(n) / sampling_rate
        f0 = f0 * rng.uniform(0.95, 1.05)
        sig = np.zeros(n)
        # Harmonics of f0 weighted by two resonances: a crude vowel-like spectrum.
        for h in range(1, int(min(4000.0, sampling_rate / 2 - 100) / f0)):
            fh = h * f0
            amp = np.exp(-(((fh - f1) / 150.0) ** 2)) + 0.6 * np.exp(-(((fh - f2) / 200.0) ** 2))
            amp += 0.02 / h
            sig += amp * np.sin(2 * np.pi * fh * t + rng.uniform(0, 2 * np.pi))
        env = np.hanning(n)
        pieces.append((sig * env).astype(np.float32))
    pieces.append(np.zeros(int(0.15 * sampling_rate), dtype=np.float32))
    audio = np.concatenate(pieces)
    peak = np.abs(audio).max() or 1.0
    audio = 0.5 * audio / peak
    audio += rng.normal(0.0, 0.003, size=audio.shape).astype(np.float32)
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


def _sample_duration(rng: np.random.Generator, dist: str, lo: float, hi: float) -> float:
    if dist == "uniform":
        return float(rng.uniform(lo, hi))
    if dist == "realistic":
        # AISHELL-like: log-normal around 4.5 s with a long right tail.
        return float(np.clip(rng.lognormal(np.log(4.5), 0.4), lo, hi))
    raise ValueError(f"unknown duration distribution {dist!r}; use 'uniform' or 'realistic'")


def random_text(rng: np.random.Generator, duration: float) -> str:
    """A transcript whose rendering lasts about ``duration`` seconds."""
    words: List[str] = []
    spent = 0.3
    while spent < duration or not words:
        n = int(rng.integers(2, 6))
        words.append("".join(rng.choice(list(ALPHABET), size=n)))
        spent += n * _CHAR_SECONDS + _SPACE_SECONDS
    return " ".join(words)


def write_units(text: Pathlike, path: Pathlike) -> Path:
    """WeNet char symbol table for the transcripts of the Kaldi ``text`` file: the table
    ``wenet-lhotse make-units`` writes for the same data (the same function,
    :func:`~wenet_lhotse.text.units.write_char_units`): ``<blank> 0``, ``<unk> 1``,
    ``<sos/eos> 2``, then the characters and ``▁`` (space) in code-point order."""
    from wenet_lhotse.text.units import write_char_units

    return write_char_units(text, path)[0]


def generate_corpus(
    out_dir: Pathlike,
    num_utterances: int = 50,
    sampling_rate: int = 16000,
    min_duration: float = 1.0,
    max_duration: float = 6.0,
    duration_dist: str = "uniform",
    shard_size: Optional[int] = None,
    num_speakers: int = 4,
    seed: int = 0,
    prefix: str = "",
) -> CorpusPaths:
    """Write a synthetic corpus in WeNet's formats and return its paths.

    :param num_utterances: number of utterances.
    :param sampling_rate: audio sampling rate (Hz).
    :param min_duration: shortest utterance (seconds).
    :param max_duration: longest utterance (seconds); one word (< 1 s) may overshoot.
    :param duration_dist: ``"uniform"`` or ``"realistic"`` (AISHELL-like log-normal).
    :param shard_size: when set, also write WeNet shards with this many
        utterances per tar, and ``shards.list``.
    :param seed: everything (text, audio) is a function of the seed.
    :param prefix: prepended to every key (to build distinct domains).
    """
    root = Path(out_dir)
    (root / "wav").mkdir(parents=True, exist_ok=True)
    import soundfile as sf

    rng = np.random.default_rng(seed)
    keys: List[str] = []
    lines: List[str] = []
    text_lines: List[str] = []
    scp_lines: List[str] = []
    total = 0.0
    for i in range(num_utterances):
        spk = f"S{i % num_speakers:03d}"
        key = f"{prefix}{spk}-U{i:06d}"
        target = _sample_duration(rng, duration_dist, min_duration, max_duration)
        rate = float(rng.uniform(0.9, 1.1))
        text = random_text(rng, max(0.5, target - 0.3) / rate)
        audio = synthesize(text, sampling_rate, rng, rate=rate)
        short = int(min_duration * sampling_rate) - len(audio)
        if short > 0:  # trailing near-silence so no utterance is shorter than asked
            audio = np.concatenate([audio, rng.normal(0, 0.003, short).astype(np.float32)])
        wav_path = (root / "wav" / f"{key}.wav").resolve()
        sf.write(str(wav_path), audio, sampling_rate, subtype="PCM_16")
        total += len(audio) / sampling_rate
        keys.append(key)
        lines.append(json.dumps({"key": key, "wav": str(wav_path), "txt": text, "speaker": spk},
                                ensure_ascii=False))
        text_lines.append(f"{key} {text}")
        scp_lines.append(f"{key} {wav_path}")
    paths = CorpusPaths(
        root=root,
        data_list=root / "data.list",
        text=root / "text",
        wav_scp=root / "wav.scp",
        units=root / "units.txt",
        shards_list=None,
        keys=keys,
        total_duration=total,
    )
    paths.data_list.write_text("\n".join(lines) + "\n", encoding="utf-8")
    paths.text.write_text("\n".join(text_lines) + "\n", encoding="utf-8")
    paths.wav_scp.write_text("\n".join(scp_lines) + "\n", encoding="utf-8")
    write_units(paths.text, paths.units)
    if shard_size:
        paths.shards_list = _write_shards(paths, shard_size)
    logger.info("generated %d utterances (%.1f s) under %s", num_utterances, total, root)
    return paths


def _write_shards(paths: CorpusPaths, shard_size: int) -> Path:
    # Shards are written from the raw list by the same writer users call, so the
    # corpus exercises it and matches WeNet's make_shard_list.py layout.
    from wenet_lhotse.formats import write_wenet_shards
    from wenet_lhotse.formats.raw_list import read_raw_list

    cuts = read_raw_list(paths.data_list)
    return write_wenet_shards(
        cuts, paths.root / "shards", shard_size=shard_size, list_path=paths.root / "shards.list"
    )
