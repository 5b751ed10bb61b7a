//! Placeholder: filled by issue 3.
