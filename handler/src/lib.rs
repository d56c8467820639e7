//! Crash capture. Work in progress: see the handler issue.
