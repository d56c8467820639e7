//! Viewer benchmarks: rendering a many-thread report with symbols (library and command line), and batch
//! symbolication with `viewer atos` against `llvm-symbolizer` on the same file and addresses.

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// One render: decode, load the debug file (mapped, as the `viewer` command loads it), symbolicate, render Apple
/// text. Returns the time in nanoseconds and how many frames of the parked threads were symbolicated to a
/// `level_NN` function.
pub fn render_once(report: &[u8], symbols: &Path) -> Result<(f64, usize), String> {
    let t0 = Instant::now();
    let mut loaded = viewer::load(report).map_err(|e| e.to_string())?;
    let mut store = viewer::SymbolStore::only(vec![symbols.to_path_buf()]).with_mapped_files();
    let text = viewer::render_loaded(&mut loaded, viewer::Layout::Modern, viewer::Format::Text, Some(&mut store));
    let ns = t0.elapsed().as_nanos() as f64;
    let named = text.lines().filter(|l| l.contains(" level_")).count();
    Ok((ns, named))
}

/// Renders with a store that already holds the debug file and the answers of the previous render (a library user
/// rendering reports one after another with one store; the collector makes a store per report): one render first
/// to load it, then `runs` timed renders (decode, symbolicate from the loaded file, render Apple text).
/// Returns the nanoseconds of each timed render.
pub fn render_warm(report: &[u8], symbols: &Path, runs: usize) -> Result<Vec<f64>, String> {
    let mut store = viewer::SymbolStore::only(vec![symbols.to_path_buf()]);
    let once = |store: &mut viewer::SymbolStore| -> Result<f64, String> {
        let t0 = Instant::now();
        let mut loaded = viewer::load(report).map_err(|e| e.to_string())?;
        let text = viewer::render_loaded(&mut loaded, viewer::Layout::Modern, viewer::Format::Text, Some(store));
        let ns = t0.elapsed().as_nanos() as f64;
        std::hint::black_box(text);
        Ok(ns)
    };
    once(&mut store)?;
    (0..runs).map(|_| once(&mut store)).collect()
}

/// One run of the `viewer` command line on the report, output discarded. Returns nanoseconds.
pub fn render_cli_once(viewer_bin: &Path, report: &Path, symbols: &Path) -> Result<f64, String> {
    let t0 = Instant::now();
    let out = Command::new(viewer_bin)
        .arg(report)
        .arg("--symbols")
        .arg(symbols)
        .arg("--no-auto-symbols")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", viewer_bin.display()))?;
    let ns = t0.elapsed().as_nanos() as f64;
    if !out.status.success() {
        return Err(format!("viewer failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(ns)
}

/// `n` addresses inside function symbols of `file` (deterministic: xorshift64 seeded with `seed`), and the image
/// base the viewer uses for the file (lowest segment address, page-aligned).
pub fn sample_addresses(file: &Path, n: usize, seed: u64) -> Result<(Vec<u64>, u64), String> {
    let data = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let obj = object::File::parse(&*data).map_err(|e| e.to_string())?;
    let base = obj.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    let funcs: Vec<(u64, u64)> = obj
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.address() > 0)
        .map(|s| (s.address(), s.size()))
        .collect();
    if funcs.is_empty() {
        return Err(format!("{}: no function symbols", file.display()));
    }
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let addrs = (0..n)
        .map(|_| {
            let (a, size) = funcs[(next() % funcs.len() as u64) as usize];
            a + next() % size
        })
        .collect();
    Ok((addrs, base))
}

/// Result of one batch symbolication run.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchRun {
    /// Wall time of the process, nanoseconds.
    pub ns: f64,
    /// Addresses resolved to a function.
    pub resolved: usize,
}

/// `viewer atos -o FILE -l BASE` with the addresses on standard input, one per line (its batch interface, as
/// `llvm-symbolizer` gets them).
pub fn viewer_atos(viewer_bin: &Path, file: &Path, base: u64, addrs: &[u64]) -> Result<BatchRun, String> {
    let mut cmd = Command::new(viewer_bin);
    cmd.arg("atos").arg("-o").arg(file).arg("-l").arg(format!("{base:#x}"));
    let (ns, out) = run_fed(cmd, addrs)?;
    let text = String::from_utf8_lossy(&out);
    // Unresolved addresses print as the bare address; resolved ones print one line per frame, the last frame of
    // each address not marked inlined.
    let unresolved = text.lines().filter(|l| l.starts_with("0x") && !l.contains(' ')).count();
    Ok(BatchRun { ns, resolved: addrs.len().saturating_sub(unresolved) })
}

/// Runs `cmd` with `addrs` on standard input (one `0x...` per line, fed from another thread so a full stdout pipe
/// cannot deadlock us); returns the wall time of the process in nanoseconds and its standard output.
fn run_fed(mut cmd: Command, addrs: &[u64]) -> Result<(f64, Vec<u8>), String> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let name = format!("{:?}", cmd.get_program());
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {name}: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let ns = t0.elapsed().as_nanos() as f64;
    let _ = feeder.join();
    if !out.status.success() {
        return Err(format!("{name} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok((ns, out.stdout))
}

/// `llvm-symbolizer --obj=FILE` with the addresses on standard input (its batch interface), default options
/// (function names, demangling, inlined frames, file:line:column).
pub fn llvm_symbolizer(bin: &str, file: &Path, addrs: &[u64]) -> Result<BatchRun, String> {
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--obj={}", file.display()));
    let (ns, out) = run_fed(cmd, addrs)?;
    let text = String::from_utf8_lossy(&out);
    // One block per address, separated by a blank line; an unresolved address's function line is `??`.
    let resolved = text.split("\n\n").filter(|b| !b.trim().is_empty() && !b.starts_with("??")).count();
    Ok(BatchRun { ns, resolved })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_addresses_are_deterministic_and_inside_functions() {
        let exe = std::env::current_exe().unwrap();
        let (a, base) = sample_addresses(&exe, 200, 7).unwrap();
        let (b, _) = sample_addresses(&exe, 200, 7).unwrap();
        assert_eq!(a, b);
        assert_eq!(base & 0xfff, 0);
        let data = std::fs::read(&exe).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let funcs: Vec<(u64, u64)> = obj
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .map(|s| (s.address(), s.size()))
            .collect();
        for x in a {
            assert!(funcs.iter().any(|&(s, n)| x >= s && x < s + n), "{x:#x} is in no function");
        }
    }
}
