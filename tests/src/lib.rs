//! Crash-test support. Work in progress.
