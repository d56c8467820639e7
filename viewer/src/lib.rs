//! Renders crash reports as Apple-style crash text. Work in progress.
