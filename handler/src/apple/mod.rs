//! Pure Apple-platform decoding (exception messages, codes, thread states, `__crash_info`); runs and is tested on
//! every host. Work in progress.
