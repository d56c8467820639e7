//! (g) Stacks on demand: the current thread's stack captured with `handler::stacks::current_stack` against glibc's
//! `backtrace(3)` and libunwind's `unw_backtrace` at 16, 64 and 256 frames, and symbolicated (our capture plus
//! `handler::symbols::SymbolCache`) against `backtrace(3)` + `backtrace_symbols(3)`, the same stack over and over.
//!
//! Runs in a child process (`bench __stacks ITERS BATCHES`) that installs the handler (so the captures use the
//! install-time image table and walkers, as an app's would) and prints `key=value` lines; the parent prints the
//! table. libunwind is `dlopen`ed (`libunwind.so.8`, `RTLD_LOCAL`), not linked: linked, its exported `backtrace`
//! and `_Unwind_Backtrace` would replace glibc's and libgcc's for the whole process.
//!
//! The stacks are chains of 16 distinct non-inlined functions calling each other round-robin down to the wanted
//! depth (a run of 16 is longer than the unwinder's repeat compression looks for, 8, so every frame is walked and
//! stored), plus the few frames of the probe's own start (`main`, `_start`). Every method's frames are checked
//! against `backtrace(3)`'s (same callers after frame 0); a difference fails the benchmark for ours and is reported
//! for libunwind.
#![allow(unsafe_code)]

use super::alloc;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::fmt::Write as _;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

extern "C" {
    /// glibc `<execinfo.h>`.
    fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int;
    /// glibc `<execinfo.h>`: one `malloc`ed block of strings, freed by the caller with `free`.
    fn backtrace_symbols(buffer: *const *mut c_void, size: c_int) -> *mut *mut c_char;
}

/// The depths measured.
pub const DEPTHS: [usize; 3] = [16, 64, 256];

/// `unw_backtrace(void **buffer, int size)` (libunwind `<libunwind.h>`).
type UnwBacktrace = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;

fn libunwind() -> Option<UnwBacktrace> {
    // SAFETY: NUL-terminated name; RTLD_LOCAL keeps its symbols out of the global namespace.
    let h = unsafe { libc::dlopen(c"libunwind.so.8".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return None;
    }
    // SAFETY: looking up a symbol of the handle just opened.
    let f = unsafe { libc::dlsym(h, c"unw_backtrace".as_ptr()) };
    // SAFETY: libunwind's `unw_backtrace` has this signature.
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, UnwBacktrace>(f) })
}

/// What runs at the bottom of a chain.
type Leaf<'a> = &'a mut dyn FnMut();

macro_rules! chain {
    ($($name:ident => $next:ident),* $(,)?) => {
        $(
            #[inline(never)]
            fn $name(depth: usize, leaf: Leaf<'_>) {
                if depth <= 1 {
                    leaf();
                } else {
                    $next(black_box(depth - 1), leaf);
                }
                // Work after the call: no tail call, the frame stays on the stack.
                black_box(depth);
            }
        )*
    };
}

chain! {
    c00 => c01, c01 => c02, c02 => c03, c03 => c04, c04 => c05, c05 => c06, c06 => c07, c07 => c08,
    c08 => c09, c09 => c10, c10 => c11, c11 => c12, c12 => c13, c13 => c14, c14 => c15, c15 => c00,
}

/// Runs `leaf` at the bottom of a chain `depth` calls deep (below the caller's frames).
fn at_depth(depth: usize, leaf: Leaf<'_>) {
    c00(depth, leaf);
}

fn ours(buf: &mut [u64]) -> usize {
    handler::stacks::current_stack(buf).map_or(0, |c| c.len)
}

fn glibc(buf: &mut [*mut c_void]) -> usize {
    // SAFETY: `buf` holds `len` pointers.
    unsafe { backtrace(buf.as_mut_ptr(), buf.len() as c_int) }.max(0) as usize
}

/// Times `iters` calls of `f` per batch, `batches` batches: nanoseconds of this thread's CPU time
/// (`CLOCK_THREAD_CPUTIME_ID`) per call, for each batch. CPU time, not wall time: on a shared machine a batch that
/// was preempted would otherwise count the other process's time.
fn time(iters: usize, batches: usize, mut f: impl FnMut()) -> Vec<f64> {
    (0..batches)
        .map(|_| {
            let t = super::sys::thread_cpu_ns();
            for _ in 0..iters {
                f();
            }
            (super::sys::thread_cpu_ns() - t) as f64 / iters as f64
        })
        .collect()
}

fn median(v: &[f64]) -> f64 {
    super::stats::summarize(v).median
}

/// The child: `ITERS BATCHES REPORTDIR`. Prints, per depth `d`: `d.frames`, `d.ours_ns`, `d.glibc_ns`,
/// `d.unw_ns` (or `unw=missing`), `d.unw_same`, `d.sym_ours_ns`, `d.sym_ours_fmt_ns`, `d.sym_glibc_ns`; plus
/// `cold_ns` (our first capture), `ours_allocs` (heap allocations in every capture of ours), and `unw=...`.
pub fn child_main(a: &[String]) -> ExitCode {
    let (Some(iters), Some(batches), Some(dir)) = (a.first(), a.get(1), a.get(2)) else {
        eprintln!("bench stacks probe: usage: ITERS BATCHES REPORTDIR");
        return ExitCode::from(2);
    };
    let (Ok(iters), Ok(batches)) = (iters.parse::<usize>(), batches.parse::<usize>()) else {
        eprintln!("bench stacks probe: bad numbers");
        return ExitCode::from(2);
    };
    if let Err(e) = handler::install(&handler::Config::new(dir)) {
        eprintln!("bench stacks probe: install: {e}");
        return ExitCode::from(3);
    }
    let unw = libunwind();
    println!("unw={}", if unw.is_some() { "libunwind.so.8" } else { "missing" });
    let mut out = BTreeMap::new();
    let mut failure = None;
    let mut symbols = match handler::symbols::SymbolCache::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench stacks probe: {e}");
            return ExitCode::from(3);
        }
    };
    let mut first = true;
    for depth in DEPTHS {
        at_depth(depth, &mut || {
            let mut a = [0u64; 1024];
            let mut b = [std::ptr::null_mut(); 1024];
            if first {
                let t = Instant::now();
                black_box(ours(&mut a));
                out.insert("cold_ns".to_string(), t.elapsed().as_nanos() as f64);
                let t = Instant::now();
                black_box(glibc(&mut b));
                out.insert("cold_glibc_ns".to_string(), t.elapsed().as_nanos() as f64);
                first = false;
            }
            let na = ours(&mut a);
            let nb = glibc(&mut b);
            let theirs: Vec<u64> = b[..nb].iter().map(|p| *p as u64).collect();
            if na < 2 || nb < 2 || a[1..na] != theirs[1..] {
                failure = Some(format!(
                    "depth {depth}: our frames differ from backtrace(3)'s:\nours   {:x?}\nglibc  {:x?}",
                    &a[..na],
                    theirs
                ));
            }
            out.insert(format!("{depth}.frames"), nb as f64);
            out.insert(
                format!("{depth}.ours_ns"),
                median(&time(iters, batches, || {
                    black_box(ours(&mut a));
                })),
            );
            out.insert(
                format!("{depth}.glibc_ns"),
                median(&time(iters, batches, || {
                    black_box(glibc(&mut b));
                })),
            );
            let a0 = alloc::snapshot();
            for _ in 0..iters {
                black_box(ours(&mut a));
            }
            let a1 = alloc::snapshot();
            *out.entry("ours_allocs".to_string()).or_insert(0.0) += (a1.calls - a0.calls) as f64;
            if let Some(unw) = unw {
                let mut c = [std::ptr::null_mut(); 1024];
                // SAFETY: `c` holds 1024 pointers.
                let nc = unsafe { unw(c.as_mut_ptr(), 1024) }.max(0) as usize;
                let same = nc >= 2 && c[1..nc].iter().map(|p| *p as u64).eq(theirs[1..].iter().copied());
                out.insert(format!("{depth}.unw_same"), if same { 1.0 } else { 0.0 });
                out.insert(format!("{depth}.unw_frames"), nc as f64);
                out.insert(
                    format!("{depth}.unw_ns"),
                    median(&time(iters, batches, || {
                        // SAFETY: `c` holds 1024 pointers.
                        black_box(unsafe { unw(c.as_mut_ptr(), 1024) });
                    })),
                );
            }
            // Symbolicated, the same stack each time.
            let sym_iters = (iters / 4).max(1);
            out.insert(
                format!("{depth}.sym_ours_ns"),
                median(&time(sym_iters, batches, || {
                    let n = ours(&mut a);
                    let mut named = 0usize;
                    for &ra in &a[..n] {
                        if let Some(s) = symbols.lookup_return_address(ra) {
                            named += s.name.map_or(0, str::len) + s.offset as usize;
                        }
                    }
                    black_box(named);
                })),
            );
            let mut line = String::with_capacity(256);
            out.insert(
                format!("{depth}.sym_ours_fmt_ns"),
                median(&time(sym_iters, batches, || {
                    let n = ours(&mut a);
                    for &ra in &a[..n] {
                        line.clear();
                        if let Some(s) = symbols.lookup_return_address(ra) {
                            let _ = write!(line, "{}({}+{:#x}) [{ra:#x}]", s.image, s.name.unwrap_or(""), s.offset);
                        }
                        black_box(&line);
                    }
                })),
            );
            out.insert(
                format!("{depth}.sym_glibc_ns"),
                median(&time(sym_iters, batches, || {
                    let n = glibc(&mut b);
                    // SAFETY: `b` holds `n` return addresses from backtrace; the result is one malloc'ed block.
                    unsafe {
                        let s = backtrace_symbols(b.as_ptr(), n as c_int);
                        black_box(s);
                        libc::free(s.cast());
                    }
                })),
            );
        });
    }
    if let Some(f) = failure {
        eprintln!("bench stacks probe: {f}");
        return ExitCode::from(4);
    }
    for (k, v) in out {
        println!("{k}={v}");
    }
    ExitCode::SUCCESS
}
