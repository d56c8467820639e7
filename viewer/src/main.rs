//! `viewer`: the command line over the `viewer` library. See `viewer/README.md` for the CLI and exit codes.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use viewer::{Format, Layout, Loaded, SymbolStore};

mod serve_cmd;

/// Exit code: rendered, input intact.
const EXIT_OK: u8 = 0;
/// Exit code: the input could not be read or is not a crash report / `.ips` file.
const EXIT_INPUT: u8 = 1;
// 2 is clap's usage-error code.
/// Exit code: rendered, but the report is damaged (what is missing is listed in the output and on stderr).
const EXIT_DAMAGED: u8 = 3;
/// Exit code: the output could not be written.
const EXIT_OUTPUT: u8 = 4;

const EXAMPLES: &str = "\
Examples:
  viewer crash.report                         render one of our reports (modern Apple layout)
  viewer crash.report --symbols MyApp.app.dSYM --symbols build/
  viewer MyApp-2022-08-04-011101.ips          render an Apple .ips the same way
  viewer --legacy crash.report                iOS <= 14 layout
  viewer --format json crash.report           decoded report and model as JSON
  viewer --format ips crash.report -o x.ips   Apple's .ips, for Xcode, Console, MacSymbolicator
  cat crash.report | viewer - -o crash.txt    read stdin, write a file
  viewer atos -o MyApp.app.dSYM -l 0x1007d4000 0x1007da384 0x1007da4bc
  viewer symbolicate MyApp.crash -s MyApp.app.dSYM   symbolicate Apple crash text from Xcode or a tester

Exit codes: 0 rendered; 1 unreadable or unknown input; 2 usage error; 3 rendered but the report is damaged;
4 output not writable.";

/// Render crash reports (ours and Apple's .ips) as Apple crash text, symbolicated.
#[derive(Parser, Debug)]
#[command(name = "viewer", version, after_help = EXAMPLES, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    render: RenderArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Render a report or .ips file (the default when no subcommand is given).
    #[command(after_help = EXAMPLES)]
    Render(RenderArgs),
    /// Resolve single addresses like Apple's atos: function + offset (file:line) per address.
    #[command(
        after_help = "Examples:\n  viewer atos -o MyApp.app.dSYM -l 0x1007d4000 0x1007da384\n  viewer atos --symbols build/ --uuid 82D13D98-219E-3040-B62A-07A297007A7C -l 0x1007d4000 0x1007da384\n  viewer atos -o ./myprog -l 0x0 0x1139\n  printf '0x1007da384\\n0x1007da4bc\\n' | viewer atos -o MyApp.app.dSYM -l 0x1007d4000"
    )]
    Atos(AtosArgs),
    /// Symbolicate Apple crash text (.crash) in place: frame lines rewritten, every other byte kept.
    #[command(after_help = SYMBOLICATE_HELP)]
    Symbolicate(SymbolicateArgs),
    /// Run the collector (ingest, grouping, symbolication, web pages); `serve token` manages ingest tokens.
    #[command(after_help = serve_cmd::SERVE_HELP)]
    Serve(serve_cmd::ServeArgs),
    /// Upload debug files (dSYM bundles, Mach-O, ELF) to a collector for server-side symbolication.
    #[command(
        after_help = "Example:\n  viewer upload-symbols build/MyApp.app.dSYM --url http://127.0.0.1:8787 --token crt_..."
    )]
    UploadSymbols(serve_cmd::UploadSymbolsArgs),
    /// List the report files in a directory (e.g. a collector store's reports/).
    #[command(after_help = "Example:\n  viewer list ./collected-reports/reports")]
    List(ListArgs),
}

const SYMBOLICATE_HELP: &str = "\
Reads modern (iOS 15+, macOS 12+) and legacy (iOS 4-14, Mac OS X 10.x-macOS 11) crash text, with or without the
JSON line Xcode puts first. Each image's debug file is found by the UUID of its Binary Images line. Frames shown as
`0xLOAD + OFFSET`, `IMAGE + OFFSET` or `???` become `symbol + offset (file:line)`; inlined functions get a line
each (same frame number, `[inlined]`). Everything else, and any line that does not parse, is kept byte for byte.
An .ips file (JSON body) is rendered as `viewer render` does.

Examples:
  viewer symbolicate MyApp-2024-05-01.crash --symbols MyApp.app.dSYM
  viewer symbolicate crash.txt -s build/dSYMs/ -o symbolicated.crash
  pbpaste | viewer symbolicate - -s ~/Archives/

Exit codes: 0 done (frames without a debug file stay as they were); 1 unreadable input; 2 usage error; 4 output
not writable.";

#[derive(Args, Debug)]
struct SymbolicateArgs {
    /// Crash text to symbolicate; `-` (or nothing) reads standard input.
    #[arg(value_name = "CRASH")]
    input: Option<String>,
    /// Debug file, dSYM bundle or directory searched recursively (repeatable).
    #[arg(short, long = "symbols", value_name = "PATH")]
    symbols: Vec<PathBuf>,
    /// Do not look for debug files at the images' own paths or in /usr/lib/debug.
    #[arg(long)]
    no_auto_symbols: bool,
    /// Write to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

fn read_input(input: &str) -> Result<Vec<u8>, String> {
    if input == "-" {
        let mut v = Vec::new();
        std::io::stdin().lock().read_to_end(&mut v).map_err(|e| format!("cannot read standard input: {e}"))?;
        Ok(v)
    } else {
        std::fs::read(input).map_err(|e| format!("cannot read {input}: {e}"))
    }
}

fn run_symbolicate(a: SymbolicateArgs) -> u8 {
    let input = a.input.unwrap_or_else(|| "-".to_string());
    let bytes = match read_input(&input) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("viewer symbolicate: {e}");
            return EXIT_INPUT;
        }
    };
    // A one-shot command: debug files are mapped, not read (see `DebugFile::load_mapped` for what that accepts).
    let mut store =
        if a.no_auto_symbols { SymbolStore::only(a.symbols) } else { SymbolStore::new(a.symbols) }.with_mapped_files();
    // An .ips with a JSON body is rendered (symbolicated) the way `viewer render` does it.
    if viewer::ips::looks_like_ips(&bytes) {
        if let Ok(mut loaded @ Loaded::Ips(_)) = viewer::load(&bytes) {
            let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(&mut store));
            for n in loaded.log().map(|l| l.symbol_notes.as_slice()).unwrap_or(&[]) {
                eprintln!("viewer symbolicate: {n}");
            }
            return match write_out(a.output.as_ref(), text.as_bytes()) {
                Ok(()) => EXIT_OK,
                Err(e) => {
                    eprintln!("viewer symbolicate: {e}");
                    EXIT_OUTPUT
                }
            };
        }
    }
    let r = viewer::crashtext::symbolicate_text(&bytes, &mut store);
    for n in &r.notes {
        eprintln!("viewer symbolicate: {n}");
    }
    eprintln!(
        "viewer symbolicate: {} of {} unsymbolicated frames symbolicated ({} images listed)",
        r.symbolicated, r.unsymbolicated, r.images
    );
    if let Err(e) = write_out(a.output.as_ref(), &r.text) {
        eprintln!("viewer symbolicate: {e}");
        return EXIT_OUTPUT;
    }
    EXIT_OK
}

#[derive(Args, Debug)]
struct ListArgs {
    /// Collector store directory.
    #[arg(value_name = "STORE")]
    store: PathBuf,
}

fn run_list(a: ListArgs) -> u8 {
    let list = match viewer::collector::list(&a.store) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("viewer list: {}: {e}", a.store.display());
            return EXIT_INPUT;
        }
    };
    let mut out = String::new();
    for r in &list {
        let when = r.capture_time_ns.map(viewer::from_report::format_time).unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{}  {}  {:<24} {:<10} {:>8} bytes\n",
            r.id,
            when,
            r.process.as_deref().unwrap_or("?"),
            r.exception.as_deref().unwrap_or("-"),
            r.size
        ));
    }
    out.push_str(&format!("{} report{}\n", list.len(), if list.len() == 1 { "" } else { "s" }));
    if let Err(e) = write_out(None, out.as_bytes()) {
        eprintln!("viewer list: {e}");
        return EXIT_OUTPUT;
    }
    EXIT_OK
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum OutFormat {
    /// Apple crash text.
    Text,
    /// JSON with stable keys.
    Json,
    /// Apple's .ips file (bug_type 309), for Xcode, Console and Apple's symbolicators.
    Ips,
}

#[derive(Args, Debug)]
struct RenderArgs {
    /// Report or .ips file to render; `-` reads standard input.
    #[arg(value_name = "REPORT")]
    input: Option<String>,
    /// Debug file, dSYM bundle or directory searched recursively (repeatable).
    #[arg(short, long = "symbols", value_name = "PATH")]
    symbols: Vec<PathBuf>,
    /// Do not look for debug files at the images' own paths or in /usr/lib/debug.
    #[arg(long)]
    no_auto_symbols: bool,
    /// Do not symbolicate at all.
    #[arg(long)]
    no_symbolicate: bool,
    /// Print the iOS <= 14 (legacy) layout.
    #[arg(long)]
    legacy: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: OutFormat,
    /// Write to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct AtosArgs {
    /// Debug file: dSYM bundle, Mach-O (thin or universal) or ELF.
    #[arg(short = 'o', long = "object", value_name = "DEBUG_FILE")]
    object: Option<PathBuf>,
    /// Search these paths for the debug file with --uuid (repeatable).
    #[arg(short, long = "symbols", value_name = "PATH")]
    symbols: Vec<PathBuf>,
    /// UUID or build ID selecting the debug file / universal slice.
    #[arg(long)]
    uuid: Option<String>,
    /// Architecture selecting the universal slice (arm64, x86_64, ...).
    #[arg(long)]
    arch: Option<String>,
    /// Runtime load address of the image (hex with 0x, or decimal).
    #[arg(short, long = "load-address", value_name = "ADDR", value_parser = parse_addr)]
    load_address: u64,
    /// Addresses to resolve (hex with 0x, or decimal); none: read them from standard input, one per line (like
    /// `atos -f` and `llvm-symbolizer`).
    #[arg(value_parser = parse_addr)]
    addresses: Vec<u64>,
    /// Write to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Resolve through `addr2line` one address at a time (the reference the batch path is tested against).
    #[arg(long, hide = true)]
    via_addr2line: bool,
}

fn parse_addr(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("not an address: {s:?} ({e})"))
}

fn write_out(output: Option<&PathBuf>, text: &[u8]) -> Result<(), String> {
    match output {
        Some(p) => std::fs::write(p, text).map_err(|e| format!("cannot write {}: {e}", p.display())),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text).and_then(|_| out.flush()).map_err(|e| format!("cannot write output: {e}"))
        }
    }
}

fn run_render(a: RenderArgs) -> u8 {
    let Some(input) = a.input else {
        eprintln!("viewer: no REPORT given (use - for standard input); see viewer --help");
        return 2;
    };
    let bytes = if input == "-" {
        let mut v = Vec::new();
        if let Err(e) = std::io::stdin().lock().read_to_end(&mut v) {
            eprintln!("viewer: cannot read standard input: {e}");
            return EXIT_INPUT;
        }
        v
    } else {
        match std::fs::read(&input) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("viewer: cannot read {input}: {e}");
                return EXIT_INPUT;
            }
        }
    };
    let mut loaded: Loaded = match viewer::load(&bytes) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("viewer: {input}: {e}");
            return EXIT_INPUT;
        }
    };
    // A one-shot command: debug files are mapped, not read (see `DebugFile::load_mapped` for what that accepts).
    let mut store =
        if a.no_auto_symbols { SymbolStore::only(a.symbols) } else { SymbolStore::new(a.symbols) }.with_mapped_files();
    let layout = if a.legacy { Layout::Legacy } else { Layout::Modern };
    let format = match a.format {
        OutFormat::Text => Format::Text,
        OutFormat::Json => Format::Json,
        OutFormat::Ips => Format::Ips,
    };
    let text = viewer::render_loaded(&mut loaded, layout, format, (!a.no_symbolicate).then_some(&mut store));
    if let Some(log) = loaded.log() {
        for n in &log.symbol_notes {
            eprintln!("viewer: symbols: {n}");
        }
    }
    if let Err(e) = write_out(a.output.as_ref(), text.as_bytes()) {
        eprintln!("viewer: {e}");
        return EXIT_OUTPUT;
    }
    let problems = loaded.problems();
    if problems.is_empty() {
        EXIT_OK
    } else {
        eprintln!("viewer: {input}: the report is damaged; rendered what survived:");
        for p in problems {
            eprintln!("viewer:   {p}");
        }
        EXIT_DAMAGED
    }
}

fn run_atos(a: AtosArgs) -> u8 {
    let id = match a.uuid.as_deref().map(viewer::symbols::parse_image_id) {
        Some(None) => {
            eprintln!("viewer atos: --uuid is not hex");
            return 2;
        }
        Some(Some(id)) => Some(id),
        None => None,
    };
    // A one-shot command: the debug file is mapped, not read (see `DebugFile::load_mapped` for what that accepts).
    let mut store = SymbolStore::only(a.symbols.clone()).with_mapped_files();
    let file = match &a.object {
        Some(path) => {
            // A dSYM bundle: use the DWARF files inside it.
            let dwarf_dir = path.join("Contents/Resources/DWARF");
            if dwarf_dir.is_dir() {
                let mut s = SymbolStore::only(vec![dwarf_dir.clone()]).with_mapped_files();
                let f = std::fs::read_dir(&dwarf_dir)
                    .ok()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.ok())
                    .find_map(|e| s.load_path(&e.path(), id.as_ref(), a.arch.as_deref()));
                for n in s.notes() {
                    eprintln!("viewer atos: {n}");
                }
                f
            } else {
                store.load_path(path, id.as_ref(), a.arch.as_deref())
            }
        }
        None => match &id {
            Some(id) => store.find(&viewer::symbols::ImageQuery { id: Some(id.clone()), ..Default::default() }),
            None => {
                eprintln!("viewer atos: give a debug file with -o, or --symbols with --uuid");
                return 2;
            }
        },
    };
    for n in store.notes() {
        eprintln!("viewer atos: {n}");
    }
    let Some(file) = file else {
        eprintln!("viewer atos: no usable debug file");
        return EXIT_INPUT;
    };
    let mut addresses = a.addresses;
    if addresses.is_empty() {
        let mut input = String::new();
        if let Err(e) = std::io::stdin().lock().read_to_string(&mut input) {
            eprintln!("viewer atos: cannot read standard input: {e}");
            return EXIT_INPUT;
        }
        for (n, line) in input.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            match parse_addr(t) {
                Ok(v) => addresses.push(v),
                // A bad line is reported and skipped; the others are still resolved.
                Err(e) => eprintln!("viewer atos: standard input line {}: {e}", n + 1),
            }
        }
    }
    let results = if a.via_addr2line {
        viewer::atos_addr2line(&file, a.load_address, &addresses)
    } else {
        viewer::atos(&file, a.load_address, &addresses)
    };
    let text = viewer::format_atos_all(&results);
    if let Err(e) = write_out(a.output.as_ref(), text.as_bytes()) {
        eprintln!("viewer atos: {e}");
        return EXIT_OUTPUT;
    }
    // The process ends right after this: freeing the debug file, the DWARF tables built for it and the results
    // (many small allocations for a large batch) would only cost time, so they are left to the exit.
    std::mem::forget(file);
    std::mem::forget(store);
    std::mem::forget(results);
    EXIT_OK
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Some(Command::Render(a)) => run_render(a),
        Some(Command::Atos(a)) => run_atos(a),
        Some(Command::Symbolicate(a)) => run_symbolicate(a),
        Some(Command::Serve(a)) => serve_cmd::run_serve(a),
        Some(Command::UploadSymbols(a)) => serve_cmd::run_upload_symbols(a),
        Some(Command::List(a)) => run_list(a),
        None => run_render(cli.render),
    };
    ExitCode::from(code)
}
