"""Audio bytes and samples the WeNet formats need: 16-bit PCM WAV encoding, telling
WAV/FLAC files apart by their magic bytes, WeNet's resampler, and fast decoding.

:func:`load_samples` and :func:`recording_from_bytes` call libsndfile (soundfile)
directly for what it reads (WAV, FLAC, ...), where Lhotse would first probe its audio
backends on every call (measured 3-5x more CPU per utterance); anything else goes
through Lhotse.

:func:`resample` lives here (not in :mod:`wenet_lhotse.features`) because the shard
writer resamples too, and formats sit below features.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

import numpy as np

from wenet_lhotse.formats.wav import HEADER_BYTES, read_pcm16_wav, wav_file_layout, wav_layout

if TYPE_CHECKING:
    import torch


def encode_pcm16_wav(samples: np.ndarray, sampling_rate: int) -> bytes:
    """Encode float samples in [-1, 1], shape (channels, samples) or (samples,), as a
    16-bit PCM WAV file. Quantizes as ``round(x * 32768)`` clipped to int16, the exact
    inverse of how 16-bit audio is loaded (``int / 32768``), so 16-bit input round-trips
    bit-exactly (libsndfile's own float->int conversion scales by 32767)."""
    import soundfile as sf

    x = np.asarray(samples)
    if x.ndim == 2:
        x = x.T  # soundfile wants (samples, channels)
    pcm = np.clip(np.round(x.astype(np.float64) * 32768.0), -32768, 32767).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, int(sampling_rate), format="WAV", subtype="PCM_16")
    return buf.getvalue()


_MAGIC = ((b"RIFF", 8, b"WAVE", "wav"), (b"fLaC", 0, b"", "flac"))


def sniff_container(data: bytes) -> Optional[str]:
    """``"wav"`` or ``"flac"`` when ``data`` starts like such a file, else None."""
    for magic, off, magic2, ext in _MAGIC:
        if data[:4] == magic and data[off:off + len(magic2)] == magic2:
            return ext
    return None


Samples = Union[np.ndarray, "torch.Tensor"]

# (orig, new, device) -> (kernel (K, new) float32, left pad, orig, new), gcd-reduced rates
_KERNELS: Dict[Tuple[int, int, str], Tuple[Any, int, int, int]] = {}


def _kernel(orig_sr: int, new_sr: int, device: Any) -> Tuple[Any, int, int, int]:
    key = (int(orig_sr), int(new_sr), str(device))
    item = _KERNELS.get(key)
    if item is None:
        if key[2] != "cpu":
            kernel, width, orig, new = _kernel(orig_sr, new_sr, "cpu")
            item = (kernel.to(device), width, orig, new)
        else:
            from lhotse.augmentation.torchaudio import get_or_create_resampler

            rs = get_or_create_resampler(key[0], key[1])
            g = int(rs.gcd)
            # the (new, 1, K) kernel of Lhotse's ResampleTensor, one column per output phase
            item = (rs.kernel[:, 0, :].t().contiguous(), int(rs.width), key[0] // g, key[1] // g)
        _KERNELS[key] = item
    return item


#: Rates accepted by :func:`resample` (Hz): 768 kHz is the highest audio rate in use;
#: a header claiming more (up to 2^31-1 Hz) is refused rather than resampled.
MIN_SAMPLING_RATE, MAX_SAMPLING_RATE = 1000, 768_000
#: Largest resampling kernel built whole (elements, float32: 16 MiB). torchaudio's
#: kernel has ``new' * (orig' + 2 * width)`` elements for the gcd-reduced rates: 32003 ->
#: 16000 Hz would take 2 GB (12 GB while building it); above this bound the output is
#: computed in blocks straight from the same formula (:func:`_blocked_resample`).
MAX_KERNEL_ELEMENTS = 1 << 22
_ROLLOFF, _ZEROS = 0.99, 6  # torchaudio's (and Lhotse's) defaults: rolloff, filter width


def sampling_rate_problem(rate: Any) -> Optional[str]:
    """Why ``rate`` (Hz) is not a sampling rate this package resamples, or None."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or not (
            MIN_SAMPLING_RATE <= rate <= MAX_SAMPLING_RATE):
        return (f"sampling rate {rate!r} Hz is outside [{MIN_SAMPLING_RATE}, "
                f"{MAX_SAMPLING_RATE}] Hz")
    return None


def _reduced(orig_sr: int, new_sr: int) -> Tuple[int, int, int]:
    """``(orig', new', width)``: the gcd-reduced rates and torchaudio's filter half-width
    (input samples)."""
    g = math.gcd(int(orig_sr), int(new_sr))
    orig, new = int(orig_sr) // g, int(new_sr) // g
    return orig, new, math.ceil(_ZEROS * orig / (min(orig, new) * _ROLLOFF))


def _blocked_resample(x: torch.Tensor, orig_sr: int, new_sr: int, length: int,
                      budget: int = MAX_KERNEL_ELEMENTS) -> torch.Tensor:
    """:func:`sinc_resample` without the whole kernel: output sample ``m`` is
    ``sum_i x[i] w(i/orig' - m/new')`` over the ``2 * width + 2`` inputs around
    ``m * orig'/new'`` (torchaudio's Hann-windowed sinc ``w``, in float64 as it builds its
    kernel, then float32), ``budget // (2 * width + 2)`` outputs at a time: memory
    ``O(budget)`` at any pair of rates. Equal to the kernel path to float32 rounding."""
    import torch

    orig, new, width = _reduced(orig_sr, new_sr)
    base = min(orig, new) * _ROLLOFF
    span = 2 * width + 2
    step = max(1, budget // span)
    n = x.numel()
    out = torch.empty(length, dtype=torch.float32, device=x.device)
    offsets = torch.arange(span, dtype=torch.int64, device=x.device)
    for m0 in range(0, length, step):
        m = torch.arange(m0, min(m0 + step, length), dtype=torch.int64, device=x.device)
        first = (m * orig) // new - width  # floor(m * orig'/new') - width
        i = first[:, None] + offsets[None, :]
        # t = (i/orig' - m/new') * base, from exact integers
        t = (i * new - (m * orig)[:, None]).to(torch.float64) * (base / (orig * new))
        t.clamp_(-_ZEROS, _ZEROS)
        window = torch.cos(t * (math.pi / _ZEROS / 2)) ** 2
        t *= math.pi
        w = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t) * window * (base / orig)
        valid = (i >= 0) & (i < n)
        xs = torch.where(valid, x[i.clamp(0, max(n - 1, 0))], torch.zeros((), device=x.device))
        out[m0:m0 + m.numel()] = (xs * w.to(torch.float32)).sum(dim=1)
    return out


def sinc_resample(x: torch.Tensor, orig_sr: int, new_sr: int, length: int) -> torch.Tensor:
    """``length`` samples of 1-D float32 ``x`` resampled from ``orig_sr`` to ``new_sr``
    Hz with Lhotse's (= torchaudio's) windowed-sinc kernel, on ``x``'s device.

    Output sample ``b * new + p`` is the dot product of the input block starting at
    ``b * orig`` (after ``width`` zeros of left padding) with phase ``p`` of the kernel,
    so all blocks are one ``(blocks, K) @ (K, new)`` product, whose rows are the output
    in order (no transposition). The ``(blocks, K)`` operand is a strided view of the
    input with overlapping rows, which the product copies once: in this orientation a
    row-wise copy of ``K`` neighbouring samples (the ``(K, blocks)`` orientation made a
    column gather and then a transposition; measured 1.5x the CPU). Lhotse's strided
    ``conv1d`` computes the same (to 1e-7) but measured 2-3x slower: oneDNN builds a
    new primitive for every input length (``bench/speed_perturb.py``).
    """
    import torch

    orig, new, width = _reduced(orig_sr, new_sr)
    if new * (orig + 2 * width) > MAX_KERNEL_ELEMENTS:  # e.g. 32003 -> 16000 Hz
        return _blocked_resample(x, orig_sr, new_sr, length)
    kernel, width, orig, new = _kernel(orig_sr, new_sr, x.device)
    k = kernel.shape[0]
    n = x.numel()
    padded = torch.nn.functional.pad(x.reshape(1, n), (width, width + orig))[0]
    blocks = (padded.numel() - k) // orig + 1
    return torch.mm(padded.as_strided((blocks, k), (orig, 1)), kernel).reshape(-1)[:length]


def as_float_tensor(samples: Samples) -> torch.Tensor:
    """1-D float32 tensor of ``samples`` (a numpy array is wrapped, not copied, when it
    already is contiguous float32)."""
    import torch

    if isinstance(samples, torch.Tensor):
        return samples.float().reshape(-1)
    return torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32).reshape(-1))


def resampled_length(num_samples: int, orig_sr: int, new_sr: int) -> int:
    """Samples :func:`resample` returns for ``num_samples`` samples: ``ceil(num_samples *
    new_sr / orig_sr)`` (the batching constraints plan lengths with this, too)."""
    if int(orig_sr) == int(new_sr):
        return int(num_samples)
    return math.ceil(int(num_samples) * int(new_sr) / int(orig_sr))


def resample(samples: Samples, orig_sr: int, new_sr: int) -> Samples:
    """Band-limited sinc resampling of a 1-D float32 signal (torchaudio's ``Resample``
    kernel, see :func:`sinc_resample`); numpy in -> numpy out, tensor in -> tensor out.

    Output length is ``ceil(num_samples * new_sr / orig_sr)``. Memory is bounded at any
    pair of rates (:data:`MAX_KERNEL_ELEMENTS`); rates outside
    [:data:`MIN_SAMPLING_RATE`, :data:`MAX_SAMPLING_RATE`] are a ``ValueError``.
    """
    if int(orig_sr) == int(new_sr):
        return samples
    for rate in (orig_sr, new_sr):
        why = sampling_rate_problem(int(rate))
        if why is not None:
            raise ValueError(f"cannot resample: {why}")
    x = as_float_tensor(samples)
    y = sinc_resample(x, int(orig_sr), int(new_sr), resampled_length(x.numel(), orig_sr, new_sr))
    return y if not isinstance(samples, np.ndarray) else y.numpy()


def recording_from_bytes(data: bytes, recording_id: str) -> Any:
    """``Recording.from_bytes(data, recording_id)``: the same manifest, with the header
    of a 16-bit PCM WAV walked by :func:`~wenet_lhotse.formats.wav.wav_layout`, any other
    read by libsndfile directly (Lhotse's backend probing cost ~3x more per item;
    libsndfile's ~40 us per WAV header was most of what was left)."""
    from lhotse import Recording

    from wenet_lhotse.io.remote_audio import header_recording

    layout = wav_layout(memoryview(data)[:HEADER_BYTES], len(data))
    if layout is not None:
        rate, channels, frames = layout.sampling_rate, layout.channels, layout.frames
    else:
        import soundfile as sf

        try:
            with sf.SoundFile(io.BytesIO(data)) as f:
                rate, channels, frames = f.samplerate, f.channels, f.frames
        except (sf.LibsndfileError, RuntimeError, TypeError):
            return Recording.from_bytes(data, recording_id=recording_id)
    return header_recording(recording_id, "memory", data, channels, rate, frames)


def load_samples(cut: Any, channel: int = 0) -> Tuple[np.ndarray, int]:
    """``(samples (n,), sampling rate in Hz)`` of one channel of a cut: ``channel`` of
    multi-channel audio, the only one of mono audio (WeNet's ``singal_channel``; a
    ``channel`` the audio does not have is a ``ValueError``). ``int16`` when the cut is a
    whole 16-bit PCM recording (a file or in-memory bytes, WAV or FLAC), else float32 in
    [-1, 1] from ``cut.load_audio()``. ``int16 / 32768`` is bit for bit the float32
    Lhotse (libsndfile) returns, and reading int16 skips libsndfile's slower float
    conversion. Float audio holding NaN or Inf is a ``ValueError`` (training would
    get non-finite features; the pipeline reports it as the cut's ``bad_audio``).
    """
    pcm = _read_pcm16(cut)
    if pcm is None:
        pcm = np.asarray(cut.load_audio(), dtype=np.float32)
        pcm = pcm.reshape(1, -1) if pcm.ndim == 1 else pcm
    else:
        pcm = pcm.T  # (channels, samples)
    if pcm.shape[0] > 1 or channel > 0:
        if channel >= pcm.shape[0]:
            raise ValueError(f"singal_channel_conf.channel {channel}: the audio has "
                             f"{pcm.shape[0]} channel(s)")
    out = np.ascontiguousarray(pcm[channel if pcm.shape[0] > 1 else 0])
    if out.dtype != np.int16 and not np.isfinite(out).all():  # float audio: NaN/Inf
        bad = int(out.size - np.count_nonzero(np.isfinite(out)))
        raise ValueError(f"audio has {bad} non-finite samples (NaN or Inf)")
    return out, int(cut.sampling_rate)


def as_float_samples(samples: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1]: int16 is divided by 32768 (exact, a power of two)."""
    if samples.dtype == np.int16:
        return np.multiply(samples, np.float32(1.0 / 32768.0), dtype=np.float32)  # one pass
    return np.asarray(samples, dtype=np.float32)


def _read_pcm16(cut: Any) -> Optional[np.ndarray]:
    rec = getattr(cut, "recording", None)
    # the whole recording, all its channels (formats.layout.is_whole_recording)
    if rec is None or len(rec.sources) != 1 or rec.transforms or cut.start != 0 \
            or cut.num_samples != rec.num_samples or rec.num_channels != cut.num_channels:
        return None
    src = rec.sources[0]
    if src.type == "url":
        from wenet_lhotse.io.remote_audio import is_audio_url, read_remote_bytes

        if not is_audio_url(str(src.source)):
            return None
        target = io.BytesIO(read_remote_bytes(src.source))  # errors name the URL
    elif src.type in ("file", "memory"):
        target = src.source if src.type == "file" else io.BytesIO(src.source)
    else:
        return None
    # the common case, 16-bit PCM WAV, without opening libsndfile
    wav = read_pcm16_wav(src.source if src.type != "url" else target.getbuffer())
    if wav is not None and wav[1].frames == rec.num_samples:
        return wav[0]
    import soundfile as sf

    try:
        with sf.SoundFile(target) as f:
            if f.subtype != "PCM_16" or f.frames != rec.num_samples:
                return None
            data = f.read(dtype="int16", always_2d=True)
    except (RuntimeError, sf.LibsndfileError, TypeError):
        return None  # let Lhotse decode it (and raise its own error)
    return data  # (samples, channels)


def probe_recording(audio_path: str, key: str) -> Any:
    """The recording of ``audio_path`` from its header: the same manifest as
    ``Recording.from_file``, about 2x faster for what libsndfile reads (WAV, FLAC,
    OGG, ...), since Lhotse's per-call audio backend probing is skipped (16-bit PCM WAV:
    the header walked without libsndfile, :mod:`.wav`); other formats (m4a, wma, ...)
    go through Lhotse."""
    from lhotse import Recording

    from wenet_lhotse.io.remote_audio import header_recording

    wav = wav_file_layout(audio_path)
    if wav is not None:
        channels, rate, frames = wav.channels, wav.sampling_rate, wav.frames
    else:
        import soundfile as sf

        try:  # SoundFile: soundfile.info also formats the format's descriptions
            with sf.SoundFile(audio_path) as f:
                channels, rate, frames = f.channels, int(f.samplerate), int(f.frames)
        except (sf.LibsndfileError, RuntimeError, TypeError):
            return Recording.from_file(audio_path, recording_id=key)
    return header_recording(key, "file", audio_path, channels, rate, frames)
