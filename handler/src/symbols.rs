//! On-device symbolication for stacks on demand (`crate::stacks`): an address → (image, symbol, offset) cache over
//! the handler's image table, using the images' own symbol tables: the ELF `.symtab` and `.dynsym` of each loaded
//! image's file (Mach-O `LC_SYMTAB` on Apple platforms), read once per image the first time an address in it is
//! asked for, the way `dladdr(3)` names addresses, but with the static functions `.symtab` holds too. No debug
//! files, no line numbers, no demangling (the names are as the symbol tables hold them; `viewer` demangles).
//! Images without a readable file (the vDSO; Apple's shared cache) are asked through `dladdr(3)`.
//!
//! Every address is resolved once: the answer is kept in a hash table (a multiplicative hash of the address), so a
//! stack seen before costs one lookup per frame. Build it on a background thread and feed it the raw addresses
//! [`crate::stacks::current_stack`] captured on the hot one: it allocates (file maps, the tables, the map) and takes
//! no lock of the handler's. `Send`, not `Sync`: one owner at a time (put it in a `Mutex` to share it).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # handler::install(&handler::Config::new("/tmp/crashes"))?;
//! let mut frames = [0u64; 64];
//! let n = handler::stacks::current_stack(&mut frames)?.len;
//! let mut symbols = handler::symbols::SymbolCache::new()?;
//! for &ra in &frames[..n] {
//!     if let Some(s) = symbols.lookup_return_address(ra) {
//!         println!("{} {}+{:#x}", s.image, s.name.unwrap_or("???"), s.offset);
//!     }
//! }
//! # Ok(()) }
//! ```

/// One image of the snapshot, with its symbols once read.
#[derive(Debug)]
struct ImageSyms {
    /// Full path as the image table holds it.
    path: String,
    /// File name (the last path component).
    name: String,
    /// Where the image's text range starts (its load address) and ends, runtime addresses.
    start: u64,
    end: u64,
    /// Load bias (runtime minus link-time address).
    bias: i64,
    /// Symbols by link-time address, read at the first lookup; `None` until then.
    table: Option<SymbolTable>,
}

/// One image's function symbols: `(link-time address, size, name range in `names`)` sorted by address.
#[derive(Debug, Default)]
struct SymbolTable {
    syms: Vec<(u64, u64, u32, u32)>,
    names: String,
    /// The file could not be read: ask `dladdr(3)` instead.
    use_dladdr: bool,
}

/// What an address resolved to, kept per address: the image, and the symbol's name (a range of
/// `SymbolCache::names`) and start.
#[derive(Clone, Copy, Debug)]
struct Resolved {
    image: u32,
    /// Start of the name in `SymbolCache::names`.
    name_off: u32,
    /// Length of the name; `u32::MAX`: no symbol covers the address.
    name_len: u32,
    /// Runtime address of the symbol's start.
    sym_start: u64,
}

/// A name for an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol<'a> {
    /// The image's file name (`libc.so.6`).
    pub image: &'a str,
    /// The image's full path.
    pub image_path: &'a str,
    /// Where the image is loaded (runtime address).
    pub image_load_address: u64,
    /// The function's name as the symbol table holds it (mangled); `None` when no symbol covers the address.
    pub name: Option<&'a str>,
    /// Bytes from the function's start (with a name), else from the image's load address.
    pub offset: u64,
}

/// The answers so far: an open-addressing table keyed by address (linear probing, a power-of-two number of slots
/// kept at most half full, Fibonacci hashing: one multiplication per lookup).
#[derive(Debug, Default)]
struct Memo {
    /// `(key, answer)`; key 0 marks an empty slot (address 0 is never asked for: [`SymbolCache::resolve`]).
    slots: Vec<(u64, Option<Resolved>)>,
    len: usize,
}

impl Memo {
    fn index(&self, key: u64) -> usize {
        let bits = self.slots.len().trailing_zeros();
        if bits == 0 {
            return 0;
        }
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
    }

    fn get(&self, key: u64) -> Option<&Option<Resolved>> {
        let mask = self.slots.len().checked_sub(1)?;
        let mut i = self.index(key);
        loop {
            let (k, v) = self.slots.get(i)?;
            if *k == key {
                return Some(v);
            }
            if *k == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    fn insert(&mut self, key: u64, value: Option<Resolved>) {
        if (self.len + 1) * 2 > self.slots.len() {
            let grown = vec![(0, None); (self.slots.len() * 2).max(1024)];
            let old = std::mem::replace(&mut self.slots, grown);
            self.len = 0;
            for (k, v) in old.into_iter().filter(|(k, _)| *k != 0) {
                self.insert(k, v);
            }
        }
        let mask = self.slots.len() - 1;
        let mut i = self.index(key);
        while let Some((k, v)) = self.slots.get_mut(i) {
            if *k == 0 || *k == key {
                if *k == 0 {
                    self.len += 1;
                }
                *k = key;
                *v = value;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.len = 0;
    }
}

/// Why a [`SymbolCache`] cannot be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolError {
    /// The crash handler is not installed (the image list is its image table).
    NotInstalled,
}

impl core::fmt::Display for SymbolError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("the crash handler is not installed: its image table is the list of images")
    }
}

impl std::error::Error for SymbolError {}

/// The address → (image, symbol, offset) cache (see the module docs).
#[derive(Debug)]
pub struct SymbolCache {
    images: Vec<ImageSyms>,
    memo: Memo,
    /// Every name handed out, once each (answers point into it).
    names: String,
    /// Where the name of each `(image, symbol start)` already is in `names`.
    named: std::collections::HashMap<(u32, u64), (u32, u32)>,
}

impl SymbolCache {
    /// A cache over the images the handler's image table holds now (a copy of paths and addresses; the symbol
    /// tables are read lazily).
    ///
    /// # Errors
    /// [`SymbolError::NotInstalled`] before `crate::install`.
    pub fn new() -> Result<SymbolCache, SymbolError> {
        let mut c = SymbolCache {
            images: Vec::new(),
            memo: Memo::default(),
            names: String::new(),
            named: std::collections::HashMap::new(),
        };
        c.refresh()?;
        Ok(c)
    }

    /// Takes the image table's list again (after `dlopen`/`dlclose` and `crate::refresh_images`) and forgets every
    /// answer.
    ///
    /// # Errors
    /// [`SymbolError::NotInstalled`].
    pub fn refresh(&mut self) -> Result<(), SymbolError> {
        let st = crate::ondemand::state().ok_or(SymbolError::NotInstalled)?;
        let list = st.images.read();
        let mut images: Vec<ImageSyms> = (0..list.len())
            .filter_map(|i| {
                let e = list.entry(i)?;
                let path = String::from_utf8_lossy(list.path(i)).into_owned();
                let name = path.rsplit('/').next().unwrap_or(&path).to_string();
                Some(ImageSyms {
                    path,
                    name,
                    start: e.load_address,
                    end: e.load_address.saturating_add(e.size.max(1)),
                    bias: e.bias,
                    table: None,
                })
            })
            .collect();
        drop(list);
        images.sort_by_key(|i| i.start);
        self.images = images;
        self.memo.clear();
        self.names.clear();
        self.named.clear();
        Ok(())
    }

    /// The image, function and offset of `address` (an exact code address, such as frame 0's pc), or `None`
    /// when no image of the table holds it.
    pub fn lookup(&mut self, address: u64) -> Option<Symbol<'_>> {
        self.resolve(address, false)
    }

    /// As [`SymbolCache::lookup`] for a return address: the function is the one holding `address - 1` (the call
    /// instruction), so a call that ends a function is not named after the next one; the offset is from
    /// `address` itself, as `backtrace_symbols(3)` and Apple's tools print it.
    pub fn lookup_return_address(&mut self, address: u64) -> Option<Symbol<'_>> {
        self.resolve(address, true)
    }

    /// Addresses resolved so far (the size of the cache).
    pub fn len(&self) -> usize {
        self.memo.len
    }

    /// Whether nothing was resolved yet.
    pub fn is_empty(&self) -> bool {
        self.memo.len == 0
    }

    fn resolve(&mut self, address: u64, ret: bool) -> Option<Symbol<'_>> {
        // One key for both kinds: bit 63 (never set in a user-space code address on Linux or Apple platforms)
        // marks a return address.
        let key = address ^ (u64::from(ret) << 63);
        if key == 0 {
            return None;
        }
        let r = match self.memo.get(key) {
            Some(r) => *r,
            None => {
                let r = self.resolve_slow(address, ret);
                self.memo.insert(key, r);
                r
            }
        }?;
        let img = self.images.get(r.image as usize)?;
        let name = if r.name_len == u32::MAX {
            None
        } else {
            let start = r.name_off as usize;
            self.names.get(start..start.saturating_add(r.name_len as usize))
        };
        let offset = match name {
            Some(_) => address.wrapping_sub(r.sym_start),
            None => address.wrapping_sub(img.start),
        };
        Some(Symbol { image: &img.name, image_path: &img.path, image_load_address: img.start, name, offset })
    }

    fn resolve_slow(&mut self, address: u64, ret: bool) -> Option<Resolved> {
        let probe = if ret { address.checked_sub(1)? } else { address };
        let at = self.images.partition_point(|i| i.start <= probe).checked_sub(1)?;
        let img = self.images.get_mut(at)?;
        if probe >= img.end {
            return None;
        }
        let table = img.table.get_or_insert_with(|| read_table(&img.path));
        let image = at as u32;
        let none = Resolved { image, name_off: 0, name_len: u32::MAX, sym_start: 0 };
        // (runtime start, name) of the symbol covering `probe`.
        let (start, name): (u64, std::borrow::Cow<'_, str>) = if table.use_dladdr {
            let Some((start, name)) = dladdr(probe) else { return Some(none) };
            (start, name.into())
        } else {
            let link = (probe as i64).wrapping_sub(img.bias) as u64;
            let i = table.syms.partition_point(|s| s.0 <= link).checked_sub(1);
            let hit = i.and_then(|i| {
                let &(a, size, off, len) = table.syms.get(i)?;
                // A zero-size symbol covers up to the next one.
                let end =
                    if size > 0 { a.saturating_add(size) } else { table.syms.get(i + 1).map_or(u64::MAX, |n| n.0) };
                let name = table.names.get(off as usize..off as usize + len as usize)?;
                (link < end).then_some(((a as i64).wrapping_add(img.bias) as u64, name))
            });
            let Some((start, name)) = hit else { return Some(none) };
            (start, name.into())
        };
        let (name_off, name_len) = match self.named.get(&(image, start)) {
            Some(&r) => r,
            None => {
                let (Ok(off), Ok(len)) = (u32::try_from(self.names.len()), u32::try_from(name.len())) else {
                    return Some(none);
                };
                self.names.push_str(&name);
                self.named.insert((image, start), (off, len));
                (off, len)
            }
        };
        Some(Resolved { image, name_off, name_len, sym_start: start })
    }
}

/// Reads the function symbols of the file at `path` (`.symtab` and `.dynsym`; Mach-O `LC_SYMTAB`). A file that
/// cannot be read or parsed gives a table that defers to `dladdr(3)`.
fn read_table(path: &str) -> SymbolTable {
    use object::{Object, ObjectSymbol, SymbolKind};
    let fallback = SymbolTable { use_dladdr: true, ..SymbolTable::default() };
    let Ok(file) = std::fs::File::open(path) else { return fallback };
    #[allow(unsafe_code)]
    // SAFETY: `Mmap::map` is unsafe because the file could change while mapped. This is a loaded image's file,
    // which is not rewritten while loaded (the loader maps it too); the map is dropped before returning, and a
    // truncated file gives parse errors, not faults, only if it shrank before the map was made.
    let Ok(map) = (unsafe { memmap2::Mmap::map(&file) }) else {
        return fallback;
    };
    let Ok(obj) = object::File::parse(&*map) else { return fallback };
    let mut t = SymbolTable::default();
    for s in obj.symbols().chain(obj.dynamic_symbols()) {
        if s.kind() != SymbolKind::Text || s.address() == 0 {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        if name.is_empty() {
            continue;
        }
        let (Ok(off), Ok(len)) = (u32::try_from(t.names.len()), u32::try_from(name.len())) else { break };
        t.names.push_str(name);
        t.syms.push((s.address(), s.size(), off, len));
    }
    // By address; of several symbols at one address (aliases, `.symtab` and `.dynsym` copies) the one with a size
    // first, then the shorter name.
    t.syms.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.3.cmp(&b.3)));
    t.syms.dedup_by_key(|s| s.0);
    t
}

/// `dladdr(3)`: the start and name of the dynamic symbol nearest below `address`.
fn dladdr(address: u64) -> Option<(u64, String)> {
    #[cfg(unix)]
    {
        // SAFETY: an all-zero Dl_info is a valid out-parameter.
        #[allow(unsafe_code)]
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        // SAFETY: `info` is a valid out-pointer; dladdr only inspects the address.
        #[allow(unsafe_code)]
        let ok = unsafe { libc::dladdr(address as usize as *const libc::c_void, &mut info) } != 0;
        if !ok || info.dli_sname.is_null() {
            return None;
        }
        // SAFETY: dladdr set `dli_sname` to a NUL-terminated string in the image's string table.
        #[allow(unsafe_code)]
        let name = unsafe { std::ffi::CStr::from_ptr(info.dli_sname) }.to_string_lossy().into_owned();
        Some((info.dli_saddr as usize as u64, name))
    }
    #[cfg(not(unix))]
    {
        let _ = address;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_keeps_every_answer_through_growth() {
        let mut m = Memo::default();
        assert!(m.get(5).is_none());
        let r = |i: u32| Some(Resolved { image: i, name_off: i, name_len: 1, sym_start: u64::from(i) });
        for i in 1..5000u32 {
            m.insert(u64::from(i) * 16, r(i));
        }
        m.insert(16, None);
        assert_eq!(m.len, 4999);
        assert!(matches!(m.get(16), Some(None)));
        for i in 2..5000u32 {
            assert_eq!(m.get(u64::from(i) * 16).and_then(|v| v.map(|v| v.image)), Some(i));
        }
        assert!(m.get(8).is_none());
        m.clear();
        assert!(m.get(32).is_none());
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn this_test_binarys_own_functions_have_names() {
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let t = read_table(exe.to_str().expect("utf-8"));
        assert!(!t.use_dladdr);
        assert!(t.syms.len() > 100, "{}", t.syms.len());
        assert!(t.syms.windows(2).all(|w| w[0].0 < w[1].0), "sorted and unique");
        assert!(read_table("/nonexistent").use_dladdr);
    }
}
