//! Bounds-checked Mach-O load-command parsing (pure; runs and is tested on every host). Work in progress.
