"""The demo and the recipes' trainer: a small CTC model (:mod:`.model`) trained through
our loader from a WeNet yaml (:mod:`.train`), per-epoch statistics and plots
(:mod:`.stats`), and the end-to-end demo on a generated corpus (:mod:`.run`)."""
