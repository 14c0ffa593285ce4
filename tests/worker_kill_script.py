"""Run as ``__main__`` by ``dropin.launch.run_patched`` in
``tests/test_hardening_worker_kill.py``: a training-like loop over ``build_dataloader``
(2 workers) that SIGKILLs one of its own DataLoader workers after the first batch, as the
out-of-memory killer would. Arguments: the data list, units.txt."""

from __future__ import annotations

import os
import signal
import sys

if __name__ == "__main__":
    from wenet_lhotse import CharTokenizer, build_dataloader

    data_list, units = sys.argv[1:3]
    conf = {"fbank_conf": {"num_mel_bins": 23}, "lhotse_conf": {"buffer_size": 8},
            "batch_conf": {"batch_type": "static", "batch_size": 2}}
    _, loader = build_dataloader(data_list, CharTokenizer(units), conf, "train",
                                 num_workers=2)
    for epoch in range(50):
        for step, _batch in enumerate(loader):
            if epoch == 0 and step == 0:
                os.kill(loader._iterator._workers[0].pid, signal.SIGKILL)
    print("the killed worker was never reported")  # the test fails on exit status 0
