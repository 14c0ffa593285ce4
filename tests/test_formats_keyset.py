"""formats.keyset: duplicate-key detection in bounded memory."""

from wenet_lhotse.formats.keyset import KeySet


def test_keyset_grows_and_stays_exact():
    keys = KeySet(capacity=4)
    names = [f"spk{i % 7}/utt.{i}" for i in range(5000)]
    assert all(keys.add(k) for k in names)
    assert len(keys) == 5000
    assert not any(keys.add(k) for k in names[::37])
    assert all(k in keys for k in names) and "spk0/utt.5000" not in keys
