//! Demangling of Swift, C++, Rust (legacy `_ZN…E` and v0 `_R…`) and Objective-C names, via `symbolic-demangle`.
//!
//! Output follows Apple's crash reports: Swift in the simplified UI form without types
//! (`_assertionFailure(_:_:file:line:flags:)`, `specialized static CrashClass.pleaseCrash()`), C++ with parameter
//! types and no return type (`google_breakpad::MinidumpFileWriter::Open(char const*)`), Rust without the hash,
//! Objective-C methods as they are (`-[Class method:]`).

use symbolic_common::{Language, Name, NameMangling};
use symbolic_demangle::{Demangle, DemangleOptions};

/// Strips the one leading underscore Mach-O symbol tables add to C-level names (`_main` -> `main`,
/// `__ZN…` -> `_ZN…`, `_$s…` -> `$s…`). Names that do not start with `_` are returned unchanged.
pub fn strip_macho_underscore(raw: &str) -> &str {
    raw.strip_prefix('_').unwrap_or(raw)
}

/// Demangles `raw` if it is a mangled Swift, C++, Rust or Objective-C++ name; otherwise returns it unchanged.
pub fn demangle(raw: &str) -> String {
    if raw.starts_with("-[") || raw.starts_with("+[") {
        return raw.to_string();
    }
    let name = Name::new(raw, NameMangling::Unknown, Language::Unknown);
    let lang = name.detect_language();
    let opts = match lang {
        Language::Swift | Language::Rust => DemangleOptions::name_only(),
        _ => DemangleOptions::name_only().parameters(true),
    };
    match name.demangle(opts) {
        Some(d) if !d.is_empty() => {
            // Swift's simplified form prints argument labels (`f(_:file:)`) but nothing for a function without
            // arguments; Apple prints `f()`. The typed form tells whether the symbol is such a function.
            if lang == Language::Swift && !d.ends_with(')') {
                if let Some(typed) = name.demangle(DemangleOptions::name_only().parameters(true)) {
                    if typed.ends_with("()") && typed.len() == d.len() + 2 {
                        return typed;
                    }
                }
            }
            d
        }
        _ => raw.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages() {
        assert_eq!(
            demangle("_ZN15google_breakpad18MinidumpFileWriter4OpenEPKc"),
            "google_breakpad::MinidumpFileWriter::Open(char const*)"
        );
        assert_eq!(
            demangle("$s15iOSCrashingTest10CrashClassC11pleaseCrashyyFZTf4d_n"),
            "specialized static CrashClass.pleaseCrash()"
        );
        assert_eq!(demangle("_ZN3foo3bar17h05af221e174051e9E"), "foo::bar");
        assert_eq!(demangle("_RNvCs1234_7mycrate4main"), "mycrate::main");
        assert_eq!(demangle("-[MyClass crashingMethod]"), "-[MyClass crashingMethod]");
        assert_eq!(demangle("main"), "main");
        assert_eq!(strip_macho_underscore("__ZN3foo3barEv"), "_ZN3foo3barEv");
    }

    #[test]
    fn swift_async_resume_partial_functions() {
        // What a Swift async frame (trust `async`) names: a resume partial function, `TQ<n>_` (await) or `TY<n>_`
        // (suspend) after its async function (Swift docs/ABI/Mangling.rst). The simplified form (Swift's
        // `SimplifiedUIDemangleOptions`, `ShowAsyncResumePartial = false`, as symbolic-demangle vendors it) names
        // the async function only, without "(1) await resume partial function for".
        assert_eq!(demangle("$s4Demo9ViewModelC4loadyyYaFTQ0_"), "ViewModel.load()");
        assert_eq!(demangle("$s4Demo9ViewModelC4loadyyYaFTY1_"), "ViewModel.load()");
        assert_eq!(demangle("$s4Demo9ViewModelC4loadyyYaF"), "ViewModel.load()");
    }
}
