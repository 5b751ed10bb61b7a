//! Fuzz-only entry points (private feature `fuzzing`).
