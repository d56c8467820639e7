//! Batch symbolication: many addresses of one debug file resolved unit by unit.
//!
//! `addr2line` answers one address at a time: for each compilation unit an address touches, it builds the unit's
//! whole line table (every row of every sequence, every file name rendered) and its function table, then searches
//! them. For a large batch spread over a binary that is most of the work, and most of what it builds is never
//! read. Here the sorted addresses are grouped by the unit that covers them, and each unit is read once for all of
//! them:
//! - its DIE tree is walked once to list the `DW_TAG_subprogram` ranges; only the functions that hold an address
//!   get their `DW_TAG_inlined_subroutine` children read (for the inline chains);
//! - its line program is run once, by a decoder that keeps only the address, file and line registers (`gimli`'s
//!   `LineRows` for what it does not handle); each sequence's rows are kept only until the sequence ends, long
//!   enough to answer the addresses inside it, and only the file names an answer uses are rendered.
//!
//! Listing the units reads each unit DIE with its abbreviation table cut after the unit DIE's own abbreviation
//! (the whole table is parsed for the few units an address or a name lands in, each shared table once), and takes
//! the ranges of a unit without any from its line program's sequences with a decoder that tracks the address
//! alone. Listing, then resolving, is spread over threads (`std::thread::scope`, each thread taking the next chunk
//! of unit headers, then the next unit, biggest first).
//!
//! The answers are meant to be exactly `addr2line`'s (the test `viewer/tests/atos_batch.rs` checks it against
//! [`super::DebugFile::lookup_batch_addr2line`]): the unit is chosen from the same unit ranges (`.debug_aranges`,
//! the unit DIE's ranges, else the line program's sequences), the function and the row by the same searches over
//! tables built in the same order, names follow `DW_AT_abstract_origin`/`DW_AT_specification` the same way. One
//! deliberate exception, code the linker dropped: a unit whose DIE declares its ranges (`DW_AT_ranges`, or
//! `DW_AT_low_pc` with `DW_AT_high_pc`) and all of them are empty has no code in the file (`--gc-sections` removed
//! it; `ld.lld` writes its `.debug_ranges` entries as `[1, 1)`). `addr2line` then takes the unit's line program's
//! sequences as its ranges, and those describe the dropped code at the address the linker resolved it to (0
//! onward), so an address of live code below their end can be named after dropped code; here such a unit covers
//! no address. On the benchmark's binary that is 337 units and 5.1 MB of line programs not decoded. Dropped code
//! whose ranges the linker wrote as `[0, size)` (`ld.lld` with DWARF 5, or a unit with `DW_AT_low_pc` and
//! `DW_AT_high_pc`) is taken for code by both, as before. An
//! address this path does not handle the way `addr2line` would — its first unit has neither a function nor a row
//! for it (`addr2line` would try the next unit), the unit's DWARF fails to parse, a split-DWARF skeleton unit, a
//! parser panic — is handed back to the caller, which resolves it with `addr2line`.

use super::{die_start, Reader, SymbolTable};
use crate::crashlog::SymbolInfo;
use crate::demangle;
use gimli::Reader as _;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock};

type Result<T> = std::result::Result<T, gimli::Error>;

/// One compilation unit of the file.
struct IndexUnit {
    /// Offset of the unit header in `.debug_info`.
    offset: usize,
    /// The unit's header. (Listing reads the unit DIE with its abbreviation table cut after the unit DIE's own
    /// abbreviation, [`listed_unit`], and keeps nothing else of it: most units are never read again.)
    header: gimli::UnitHeader<Reader>,
    /// The unit with its whole abbreviation table, as `addr2line` reads it: parsed the first time a probe or a
    /// name reference needs its DIEs; `None` when it does not parse (its probes are then left to `addr2line`).
    /// Boxed: a `gimli::Unit` is 576 bytes and few units are ever parsed, so the list stays small (unboxed, listing
    /// the benchmark binary's 3,456 units moved 688 bytes each through fresh pages: 900 more page faults a render).
    /// (The unit counts here are of the binary measured; each build of it has a few more or fewer.)
    full: OnceLock<Option<Box<gimli::Unit<Reader>>>>,
}

/// One address range of a unit; sorted by `end`, as `addr2line` sorts them.
struct UnitRange {
    begin: u64,
    end: u64,
    /// The lowest `begin` of this range and of every range after it in the sorted list.
    min_begin: u64,
    unit: usize,
}

/// The units of a file and their address ranges.
struct Index {
    units: Vec<IndexUnit>,
    ranges: Vec<UnitRange>,
    /// Whole abbreviation tables parsed for [`Index::full`], by offset in `.debug_abbrev` (units share tables;
    /// `None`: the table does not parse).
    tables: Mutex<HashMap<usize, Option<Arc<gimli::Abbreviations>>>>,
}

/// `DW_AT_low_pc`, `DW_AT_high_pc` and `DW_AT_ranges` of one DIE.
#[derive(Default)]
struct RangeAttrs {
    low_pc: Option<u64>,
    high_pc: Option<u64>,
    size: Option<u64>,
    ranges_offset: Option<gimli::RangeListsOffset<usize>>,
}

impl RangeAttrs {
    /// Reads one attribute if it is a range attribute; true when it was.
    fn read(&mut self, unit: gimli::UnitRef<'_, Reader>, attr: &gimli::Attribute<Reader>) -> Result<bool> {
        match attr.name() {
            gimli::DW_AT_low_pc => match attr.value() {
                gimli::AttributeValue::Addr(v) => self.low_pc = Some(v),
                gimli::AttributeValue::DebugAddrIndex(i) => self.low_pc = Some(unit.address(i)?),
                _ => {}
            },
            gimli::DW_AT_high_pc => match attr.value() {
                gimli::AttributeValue::Addr(v) => self.high_pc = Some(v),
                gimli::AttributeValue::DebugAddrIndex(i) => self.high_pc = Some(unit.address(i)?),
                gimli::AttributeValue::Udata(v) => self.size = Some(v),
                _ => {}
            },
            gimli::DW_AT_ranges => self.ranges_offset = unit.attr_ranges_offset(attr.value())?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Whether the DIE says where its code is (`DW_AT_ranges`, or `DW_AT_low_pc` with `DW_AT_high_pc`), empty or not.
    /// (`DW_AT_low_pc` alone is only a base address.)
    fn declared(&self) -> bool {
        self.ranges_offset.is_some() || (self.low_pc.is_some() && (self.high_pc.is_some() || self.size.is_some()))
    }

    /// Calls `f` with each non-empty range; true when there was one.
    fn for_each(&self, unit: gimli::UnitRef<'_, Reader>, mut f: impl FnMut(gimli::Range)) -> Result<bool> {
        let mut any = false;
        let mut add = |r: gimli::Range| {
            if r.begin < r.end {
                f(r);
                any = true;
            }
        };
        if let Some(off) = self.ranges_offset {
            let mut list = unit.ranges(off)?;
            while let Some(r) = list.next()? {
                add(r);
            }
        } else if let (Some(begin), Some(end)) = (self.low_pc, self.high_pc) {
            add(gimli::Range { begin, end });
        } else if let (Some(begin), Some(size)) = (self.low_pc, self.size) {
            // A -1 tombstone wraps and gives an empty range, which is skipped.
            add(gimli::Range { begin, end: begin.wrapping_add(size) });
        }
        Ok(any)
    }
}

impl Index {
    /// Lists the units and their ranges the way `addr2line::Context` does, the units read on up to `threads`
    /// threads (in chunks taken in turn; the result does not depend on the thread count).
    fn parse(dwarf: &gimli::Dwarf<Reader>, threads: usize) -> Result<Index> {
        let mut aranges = Vec::new();
        let mut headers = dwarf.debug_aranges.headers();
        while let Some(h) = headers.next()? {
            aranges.push((h.debug_info_offset().0, h.offset()));
        }
        aranges.sort_by_key(|a| a.0);
        let mut headers = Vec::new();
        let mut iter = dwarf.units();
        while let Some(header) = iter.next()? {
            headers.push(header);
        }
        const CHUNK: usize = 64;
        let chunks: Vec<&[gimli::UnitHeader<Reader>]> = headers.chunks(CHUNK).collect();
        let next = AtomicUsize::new(0);
        let done: Mutex<Vec<(usize, Result<ParsedChunk>)>> = Mutex::new(Vec::new());
        let run = || loop {
            let c = next.fetch_add(1, AtomicOrdering::Relaxed);
            let Some(chunk) = chunks.get(c) else { break };
            let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut roots = RootAbbreviations::new();
                chunk
                    .iter()
                    .map(|h| parse_unit(dwarf, &aranges, h.clone(), &mut roots))
                    .collect::<Result<ParsedChunk>>()
            }))
            .unwrap_or(Err(gimli::Error::InvalidAddressRange));
            if let Ok(mut d) = done.lock() {
                d.push((c, parsed));
            }
        };
        std::thread::scope(|scope| {
            for _ in 1..threads.clamp(1, 8).min(chunks.len().max(1)) {
                scope.spawn(run);
            }
            run();
        });
        let mut done = done.into_inner().map_err(|_| gimli::Error::InvalidAddressRange)?;
        if done.len() != chunks.len() {
            return Err(gimli::Error::InvalidAddressRange);
        }
        done.sort_by_key(|d| d.0);
        let mut units = Vec::new();
        let mut ranges = Vec::new();
        for (_, chunk) in done {
            for (unit, unit_ranges) in chunk?.into_iter().flatten() {
                let id = units.len();
                ranges.extend(unit_ranges.into_iter().map(|r| UnitRange {
                    begin: r.begin,
                    end: r.end,
                    min_begin: 0,
                    unit: id,
                }));
                units.push(unit);
            }
        }
        ranges.sort_by_key(|r| r.end);
        let mut min = u64::MAX;
        for r in ranges.iter_mut().rev() {
            min = min.min(r.begin);
            r.min_begin = min;
        }
        Ok(Index { units, ranges, tables: Mutex::new(HashMap::new()) })
    }

    /// The first unit `addr2line` would look in for `probe` (`None` when no unit covers it).
    fn first_unit(&self, probe: u64) -> Option<usize> {
        let high = probe.checked_add(1)?;
        let pos = match self.ranges.binary_search_by_key(&probe, |r| r.end) {
            Ok(i) => i + 1,
            Err(i) => i,
        };
        self.ranges[pos..]
            .iter()
            .take_while(|r| high > r.min_begin)
            .find(|r| probe < r.end && high > r.begin)
            .map(|r| r.unit)
    }

    /// Unit `i` with its whole abbreviation table, as `addr2line` reads it (`gimli::Dwarf::unit`), parsed the first
    /// time (see [`IndexUnit::full`]); tables shared by units are parsed once.
    ///
    /// # Errors
    /// `gimli::Error::UnknownAbbreviation(0)` when the unit does not parse.
    fn full(&self, dwarf: &gimli::Dwarf<Reader>, i: usize) -> Result<&gimli::Unit<Reader>> {
        let unit = self.units.get(i).ok_or(gimli::Error::NoEntryAtGivenOffset)?;
        unit.full
            .get_or_init(|| {
                let offset = unit.header.debug_abbrev_offset();
                // The lock is held while a table is parsed: a few milliseconds at most, and the table is shared.
                let table = self
                    .tables
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(offset.0)
                    .or_insert_with(|| dwarf.debug_abbrev.abbreviations(offset).ok().map(Arc::new))
                    .clone()?;
                gimli::Unit::new_with_abbreviations(dwarf, unit.header.clone(), table).ok().map(Box::new)
            })
            .as_deref()
            .ok_or(gimli::Error::UnknownAbbreviation(0))
    }

    /// The unit holding `.debug_info` offset `off`, and the offset inside it.
    fn unit_at(
        &self,
        dwarf: &gimli::Dwarf<Reader>,
        off: gimli::DebugInfoOffset<usize>,
    ) -> Result<(&gimli::Unit<Reader>, gimli::UnitOffset)> {
        let unit = match self.units.binary_search_by_key(&off.0, |u| u.offset) {
            Ok(_) | Err(0) => return Err(gimli::Error::NoEntryAtGivenOffset),
            Err(i) => self.full(dwarf, i - 1)?,
        };
        let at = off.to_unit_offset(&unit.header).ok_or(gimli::Error::NoEntryAtGivenOffset)?;
        Ok((unit, at))
    }
}

/// The units of a run of unit headers, in order: `None` for a unit `addr2line` leaves out (type units, units that
/// do not parse), else the unit and its address ranges.
type ParsedChunk = Vec<Option<(IndexUnit, Vec<gimli::Range>)>>;

/// One unit as `addr2line::Context` lists it: its ranges from `.debug_aranges` (`aranges`: `(unit offset, aranges
/// header offset)` sorted) unless the unit DIE has `DW_AT_ranges`, else the unit DIE's ranges, else the line
/// program's sequences; but none for a unit whose DIE declares ranges that are all empty (dropped code, see the
/// module's documentation).
fn parse_unit(
    dwarf: &gimli::Dwarf<Reader>,
    aranges: &[(usize, gimli::DebugArangesOffset<usize>)],
    header: gimli::UnitHeader<Reader>,
    roots: &mut RootAbbreviations,
) -> Result<Option<(IndexUnit, Vec<gimli::Range>)>> {
    let Some(offset) = header.offset().as_debug_info_offset() else { return Ok(None) };
    let need_range = match header.type_() {
        gimli::UnitType::Type { .. } | gimli::UnitType::SplitType { .. } => return Ok(None),
        gimli::UnitType::Partial => false,
        _ => true,
    };
    let Some(mut unit) = listed_unit(dwarf, header.clone(), roots) else { return Ok(None) };
    match unit_ranges(dwarf, aranges, &mut unit, offset, need_range) {
        Ok(Some(ranges)) => Ok(Some((IndexUnit { offset: offset.0, header, full: OnceLock::new() }, ranges))),
        Ok(None) => Ok(None),
        // A unit whose whole abbreviation table does not parse is one `addr2line` leaves out before reading its
        // ranges: left out too, rather than failing the whole list.
        Err(_) if dwarf.unit(header).is_err() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The ranges of a unit (see [`parse_unit`]); `None` when its unit DIE is missing.
fn unit_ranges(
    dwarf: &gimli::Dwarf<Reader>,
    aranges: &[(usize, gimli::DebugArangesOffset<usize>)],
    listed: &mut ListedUnit,
    offset: gimli::DebugInfoOffset<usize>,
    mut need_range: bool,
) -> Result<Option<Vec<gimli::Range>>> {
    let uref = gimli::UnitRef::new(dwarf, &listed.unit);
    let mut ranges = Vec::new();
    if need_range {
        let mut entries = uref.entries_raw(None)?;
        let Some(abbrev) = entries.read_abbreviation()? else { return Ok(None) };
        let mut attrs = RangeAttrs::default();
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec)?;
            attrs.read(uref, &attr)?;
        }
        if attrs.ranges_offset.is_none() {
            let first = aranges.partition_point(|a| a.0 < offset.0);
            for (_, at) in aranges[first..].iter().take_while(|a| a.0 == offset.0) {
                let mut entries = dwarf.debug_aranges.header(*at)?.entries();
                while let Some(e) = entries.next().transpose() {
                    let Ok(e) = e else { continue };
                    if e.length() != 0 {
                        ranges.push(e.range());
                        need_range = false;
                    }
                }
            }
        }
        if need_range {
            // Declared and all empty: code the linker dropped, whose line program `addr2line` would read anyway.
            need_range = !attrs.for_each(uref, |r| ranges.push(r))? && !attrs.declared();
        }
    }
    if need_range {
        // No ranges declared by the unit DIE: the line program's sequences (none when it does not parse; nor does
        // the unit, for `addr2line`).
        listed.parse_line_program(dwarf);
        if let Ok(sequences) = line_sequences(gimli::UnitRef::new(dwarf, &listed.unit)) {
            ranges.extend(sequences.into_iter().map(|(begin, end)| gimli::Range { begin, end }));
        }
    }
    Ok(Some(ranges))
}

/// Unit DIE abbreviations already parsed for one chunk of units being listed, by (abbreviation table offset,
/// code): units often share a table.
type RootAbbreviations = HashMap<(usize, u64), Arc<gimli::Abbreviations>>;

/// A unit as listing reads it: the `gimli::Unit` of its unit DIE, without its line program until one is needed.
struct ListedUnit {
    unit: gimli::Unit<Reader>,
    /// `DW_AT_stmt_list`, `DW_AT_name` and `DW_AT_comp_dir` of a line program not parsed yet.
    line_program: Option<LineProgramAt>,
}

impl ListedUnit {
    /// Parses the line program's header kept for later, as `gimli::Unit::new_with_abbreviations` would have
    /// (`unit.line_program` stays `None` when it does not parse; `gimli` would have failed the unit).
    fn parse_line_program(&mut self, dwarf: &gimli::Dwarf<Reader>) {
        let Some((at, name, comp_dir)) = self.line_program.take() else { return };
        let unit = &self.unit;
        let string = |v: Option<gimli::AttributeValue<Reader>>| v.and_then(|v| dwarf.attr_string(unit, v).ok());
        let program = dwarf.debug_line.program(at, unit.header.address_size(), string(comp_dir), string(name));
        self.unit.line_program = program.ok();
    }
}

/// Where a unit's line program is, and the unit's name and directory that its header takes (`DW_AT_stmt_list`,
/// `DW_AT_name`, `DW_AT_comp_dir`).
type LineProgramAt =
    (gimli::DebugLineOffset<usize>, Option<gimli::AttributeValue<Reader>>, Option<gimli::AttributeValue<Reader>>);

/// The unit of `header` with its abbreviation table cut after the unit DIE's own abbreviation
/// ([`root_abbreviation`]): listing reads nothing else of a unit's DIEs, and parsing every unit's whole table (as
/// `gimli::Dwarf::unit` does) was about a quarter of the listing's time on the benchmark's Rust binary (3,399
/// units). Nor is the line program's header parsed ([`lean_unit`]) unless the unit declares no ranges. Falls back
/// to `gimli::Dwarf::unit` when the cut table does not parse, so a unit is left out (`None`) only when `addr2line`
/// leaves it out too. (A unit whose table or line program header fails is listed here and left out by
/// `addr2line`; its probes fail when [`Index::full`] parses the unit as `addr2line` does, and go to `addr2line`.)
fn listed_unit(
    dwarf: &gimli::Dwarf<Reader>,
    header: gimli::UnitHeader<Reader>,
    roots: &mut RootAbbreviations,
) -> Option<ListedUnit> {
    root_abbreviation(dwarf, &header, roots)
        .and_then(|abbrevs| lean_unit(dwarf, header.clone(), abbrevs).ok())
        .or_else(|| dwarf.unit(header).ok().map(|unit| ListedUnit { unit, line_program: None }))
}

/// `gimli::Unit::new_with_abbreviations` but for the line program, whose header it parses whole (every directory
/// and file entry, into vectors) though most units never need it: the unit DIE's attributes are read as it reads
/// them (gimli 0.32, `read/dwarf.rs`; `check_lean_units` compares the two), and the line program's place is kept
/// for [`ListedUnit::parse_line_program`]. One difference: a null entry before the unit DIE, which `gimli` skips,
/// is an error here ([`listed_unit`] then falls back to `gimli`). On the benchmark's binary, the command's render
/// took about 3 ms less wall time and CPU.
///
/// # Errors
/// What `gimli` returns for the unit DIE (`MissingUnitDie` when there is none) or its `DW_AT_low_pc`.
fn lean_unit(
    dwarf: &gimli::Dwarf<Reader>,
    header: gimli::UnitHeader<Reader>,
    abbreviations: Arc<gimli::Abbreviations>,
) -> Result<ListedUnit> {
    let (encoding, file) = (header.encoding(), dwarf.file_type);
    let mut unit = gimli::Unit {
        abbreviations,
        name: None,
        comp_dir: None,
        low_pc: 0,
        str_offsets_base: gimli::DebugStrOffsetsBase::default_for_encoding_and_file(encoding, file),
        addr_base: gimli::DebugAddrBase(0),
        loclists_base: gimli::DebugLocListsBase::default_for_encoding_and_file(encoding, file),
        rnglists_base: gimli::DebugRngListsBase::default_for_encoding_and_file(encoding, file),
        line_program: None,
        dwo_id: match header.type_() {
            gimli::UnitType::Skeleton(id) | gimli::UnitType::SplitCompilation(id) => Some(id),
            _ => None,
        },
        header,
    };
    let (mut name, mut comp_dir, mut low_pc, mut line_program) = (None, None, None, None);
    let mut entries = unit.header.entries_raw(&unit.abbreviations, None)?;
    let abbrev = entries.read_abbreviation()?.ok_or(gimli::Error::MissingUnitDie)?;
    for spec in abbrev.attributes() {
        let attr = entries.read_attribute(*spec)?;
        match (attr.name(), attr.value()) {
            (gimli::DW_AT_name, v) => name = Some(v),
            (gimli::DW_AT_comp_dir, v) => comp_dir = Some(v),
            (gimli::DW_AT_low_pc, v) => low_pc = Some(v),
            (gimli::DW_AT_stmt_list, gimli::AttributeValue::DebugLineRef(at)) => line_program = Some(at),
            (gimli::DW_AT_str_offsets_base, gimli::AttributeValue::DebugStrOffsetsBase(base)) => {
                unit.str_offsets_base = base;
            }
            (gimli::DW_AT_addr_base | gimli::DW_AT_GNU_addr_base, gimli::AttributeValue::DebugAddrBase(base)) => {
                unit.addr_base = base;
            }
            (gimli::DW_AT_loclists_base, gimli::AttributeValue::DebugLocListsBase(base)) => unit.loclists_base = base,
            (
                gimli::DW_AT_rnglists_base | gimli::DW_AT_GNU_ranges_base,
                gimli::AttributeValue::DebugRngListsBase(base),
            ) => unit.rnglists_base = base,
            (gimli::DW_AT_GNU_dwo_id, gimli::AttributeValue::DwoId(id)) if unit.dwo_id.is_none() => {
                unit.dwo_id = Some(id);
            }
            _ => {}
        }
    }
    if let Some(v) = low_pc {
        if let Some(address) = dwarf.attr_address(&unit, v)? {
            unit.low_pc = address;
        }
    }
    Ok(ListedUnit { unit, line_program: line_program.map(|at| (at, name, comp_dir)) })
}

/// The abbreviation table of `header` cut after its unit DIE's abbreviation (an abbreviation table is a list of
/// entries ended by a zero code, DWARF 5 section 7.5.3): the entries up to that one, copied, and a zero code.
/// `None` when the code is not found or the entries do not parse.
fn root_abbreviation(
    dwarf: &gimli::Dwarf<Reader>,
    header: &gimli::UnitHeader<Reader>,
    roots: &mut RootAbbreviations,
) -> Option<Arc<gimli::Abbreviations>> {
    let code = header.range_from(gimli::UnitOffset(header.header_size())..).ok()?.read_uleb128().ok()?;
    let offset = header.debug_abbrev_offset().0;
    if let Some(a) = roots.get(&(offset, code)) {
        return Some(a.clone());
    }
    let mut table = gimli::Section::reader(&dwarf.debug_abbrev).clone();
    table.skip(offset).ok()?;
    let start = table.clone();
    loop {
        let this = table.read_uleb128().ok()?;
        if this == 0 {
            return None;
        }
        table.read_uleb128().ok()?; // tag
        table.read_u8().ok()?; // children
        loop {
            let name = table.read_uleb128().ok()?;
            let form = table.read_uleb128().ok()?;
            if form == u64::from(gimli::DW_FORM_implicit_const.0) {
                table.read_sleb128().ok()?;
            }
            if name == 0 && form == 0 {
                break;
            }
        }
        if this == code {
            break;
        }
    }
    let mut bytes = start.to_slice().ok()?.get(..table.offset_from(&start))?.to_vec();
    bytes.push(0);
    let cut = gimli::DebugAbbrev::from(gimli::EndianReader::new(super::Bytes::new(bytes), start.endian()));
    let abbrevs = Arc::new(cut.abbreviations(gimli::DebugAbbrevOffset(0)).ok()?);
    roots.insert((offset, code), abbrevs.clone());
    Some(abbrevs)
}

/// A probe inside a sequence: `(probe position, sequence number, row)`, the row `(file index, line)`.
type Hit = (usize, usize, Option<(u64, u32)>);

/// The subprograms of a unit: their DIE offsets, and their ranges `(range, index into the offsets)`.
type Functions = (Vec<gimli::UnitOffset>, Vec<(gimli::Range, usize)>);

/// The `(start, end)` of every sequence with rows of a unit's line program, as [`sweep_lines`] gives them.
fn line_sequences(unit: gimli::UnitRef<'_, Reader>) -> Result<Vec<(u64, u64)>> {
    Ok(sweep_lines(unit, &[])?.sequences)
}

/// One row of a line program: address, file index, line register, and whether it ends its sequence.
type Row = (u64, u64, u64, bool);

/// What one instruction of a line program does besides moving the address (DWARF 5 section 6.2.5).
enum Step {
    /// It moves the line register by `line`, then appends a row; `end`: the row ends the sequence.
    Row { line: i64, end: bool },
    /// It moves the line register by this much.
    Line(i64),
    /// It sets the file register.
    File(u64),
    /// Nothing the decoders here keep.
    Nothing,
    /// `DW_LNE_define_file`: left to `gimli`.
    DefineFile,
}

/// The address register of a line program's state machine (DWARF 5 section 6.2.2) and the instructions' decoding,
/// as `gimli`'s `LineRows` does them (same tombstones, same errors): what [`run_fast`] and [`sequence_bounds`]
/// share.
struct Machine<'h> {
    header: &'h gimli::LineProgramHeader<Reader>,
    address: u64,
    /// In tombstoned code (`DW_LNE_set_address` went backwards or to -1/-2): the address stays, and rows are
    /// dropped (an end of sequence's reset still happens).
    tombstone: bool,
    /// The highest address of the address size.
    mask: u64,
    min_len: u64,
}

impl<'h> Machine<'h> {
    /// `None` for what neither decoder handles: VLIW operation indexes, addresses other than 4 or 8 bytes, a line
    /// range of 0.
    fn new(header: &'h gimli::LineProgramHeader<Reader>) -> Option<Self> {
        let encoding = header.line_encoding();
        let size = header.address_size();
        if encoding.maximum_operations_per_instruction != 1 || !(size == 4 || size == 8) || encoding.line_range == 0 {
            return None;
        }
        let mask = u64::MAX >> (64 - u32::from(size) * 8);
        let min_len = u64::from(encoding.minimum_instruction_length);
        Some(Machine { header, address: 0, tombstone: false, mask, min_len })
    }

    /// The registers as at the start of a sequence.
    fn reset(&mut self) {
        (self.address, self.tombstone) = (0, false);
    }

    /// The address moved by `by` bytes (past the address size: an error).
    #[inline]
    fn advanced(&self, by: u64) -> Result<u64> {
        match self.address.checked_add(by) {
            Some(a) if a & !self.mask == 0 => Ok(a),
            _ => Err(gimli::Error::AddressOverflow),
        }
    }

    /// Moves the address by `by` bytes, unless in tombstoned code.
    #[inline]
    fn advance(&mut self, by: u64) -> Result<()> {
        if !self.tombstone {
            self.address = self.advanced(by)?;
        }
        Ok(())
    }

    /// Bytes `DW_LNS_const_add_pc` moves the address: as special opcode 255 (section 6.2.5.2).
    fn const_add_pc(&self) -> u64 {
        let encoding = self.header.line_encoding();
        self.min_len.wrapping_mul(u64::from((255 - self.header.opcode_base()) / encoding.line_range))
    }

    /// Runs one instruction whose first byte, `opcode`, was read already, reading its operands from `input`.
    fn step(&mut self, opcode: u8, input: &mut gimli::EndianSlice<'_, gimli::RunTimeEndian>) -> Result<Step> {
        let (header, encoding) = (self.header, self.header.line_encoding());
        if opcode == 0 {
            let length = input.read_uleb128().and_then(<usize as gimli::ReaderOffset>::from_u64)?;
            let mut rest = input.split(length)?;
            return Ok(match gimli::DwLne(rest.read_u8()?) {
                gimli::DW_LNE_end_sequence => Step::Row { line: 0, end: true },
                gimli::DW_LNE_set_address => {
                    let a = rest.read_address(header.address_size())?;
                    self.tombstone = a < self.address || a >= self.mask - 1;
                    if !self.tombstone {
                        self.address = a;
                    }
                    Step::Nothing
                }
                gimli::DW_LNE_define_file => Step::DefineFile,
                gimli::DW_LNE_set_discriminator => {
                    rest.read_uleb128()?;
                    Step::Nothing
                }
                _ => Step::Nothing,
            });
        }
        if opcode >= header.opcode_base() {
            // A special opcode (section 6.2.5.1).
            let adjusted = opcode - header.opcode_base();
            self.advance(self.min_len.wrapping_mul(u64::from(adjusted / encoding.line_range)))?;
            let line = i64::from(encoding.line_base) + i64::from(adjusted % encoding.line_range);
            return Ok(Step::Row { line, end: false });
        }
        Ok(match gimli::DwLns(opcode) {
            gimli::DW_LNS_copy => Step::Row { line: 0, end: false },
            gimli::DW_LNS_advance_pc => {
                let ops = input.read_uleb128()?;
                self.advance(self.min_len.wrapping_mul(ops))?;
                Step::Nothing
            }
            gimli::DW_LNS_advance_line => Step::Line(input.read_sleb128()?),
            gimli::DW_LNS_set_file => Step::File(input.read_uleb128()?),
            gimli::DW_LNS_set_column | gimli::DW_LNS_set_isa => {
                input.read_uleb128()?;
                Step::Nothing
            }
            gimli::DW_LNS_negate_stmt
            | gimli::DW_LNS_set_basic_block
            | gimli::DW_LNS_set_prologue_end
            | gimli::DW_LNS_set_epilogue_begin => Step::Nothing,
            gimli::DW_LNS_const_add_pc => {
                self.advance(self.const_add_pc())?;
                Step::Nothing
            }
            gimli::DW_LNS_fixed_advance_pc => {
                let by = input.read_u16()?;
                self.advance(u64::from(by))?;
                Step::Nothing
            }
            _ => {
                // An opcode this DWARF version does not define: skip its operands, as the header counts them.
                let mut lengths = header.standard_opcode_lengths().clone();
                lengths.skip(usize::from(opcode - 1))?;
                for _ in 0..lengths.read_u8()? {
                    input.read_uleb128()?;
                }
                Step::Nothing
            }
        })
    }
}

/// Runs a line program the way `gimli`'s `LineRows` does (same rows, same tombstones, same errors) but keeping
/// only what rows need here (address, file, line), calling `row` for each. `Ok(None)` for what it does not
/// handle (VLIW operation indexes, addresses other than 4 or 8 bytes, `DW_LNE_define_file`), left to `gimli`;
/// rows already given must then be dropped.
fn run_fast(header: &gimli::LineProgramHeader<Reader>, mut row: impl FnMut(Row)) -> Result<Option<()>> {
    let Some(mut machine) = Machine::new(header) else { return Ok(None) };
    let advance_line = |line: u64, by: i64| -> u64 {
        if by < 0 {
            line.saturating_sub(by.unsigned_abs())
        } else {
            line.wrapping_add(by as u64)
        }
    };
    // Decoded from a plain slice: splitting the shared-buffer reader for each extended opcode would count a
    // reference up and down every time.
    let program = header.raw_program_buf();
    let mut input = gimli::EndianSlice::new(program.bytes(), program.endian());
    // The other registers this needs (DWARF 5 section 6.2.2), as at the start of a sequence.
    let (mut file, mut line) = (1u64, 1u64);
    while !input.is_empty() {
        let opcode = input.read_u8()?;
        match machine.step(opcode, &mut input)? {
            Step::Row { line: by, end } => {
                line = advance_line(line, by);
                // A row in tombstoned code is dropped, an end of sequence too (its reset still happens).
                if !machine.tombstone {
                    row((machine.address, file, line, end));
                }
                if end {
                    machine.reset();
                    (file, line) = (1, 1);
                }
            }
            Step::Line(by) => line = advance_line(line, by),
            Step::File(f) => file = f,
            Step::Nothing => {}
            Step::DefineFile => return Ok(None),
        }
    }
    Ok(Some(()))
}

/// The `(start, end)` of every sequence with rows of a line program, in program order: what [`run_fast`]'s rows
/// give [`sweep_lines`] when it has no probes (a sequence starts at its first row, ends at its end-of-sequence
/// row; a sequence whose end-of-sequence row is dropped as tombstoned goes on into the next one), the same
/// failures, and `Ok(None)` in the same cases. Listing a unit without ranges needs nothing else, so this keeps no
/// line or file register and makes no rows; most instructions (special opcodes, one byte each, those with no
/// operand, a one-byte one, or a two-byte one whose value is not needed) run in a loop of table lookups, the rest
/// through [`Machine::step`].
/// `tests/atos_batch.rs` compares it with `gimli` on every unit (`check_run_fast`), and a property test here on
/// generated programs.
#[inline(never)]
fn sequence_bounds(header: &gimli::LineProgramHeader<Reader>) -> Result<Option<Vec<(u64, u64)>>> {
    // No instructions, no sequences (for `gimli` too, whatever the header): the tables below are not filled for
    // nothing. 2,801 of the benchmark binary's units (Rust codegen units left without code) have such programs.
    if header.raw_program_buf().is_empty() {
        return Ok(Some(Vec::new()));
    }
    let Some(mut machine) = Machine::new(header) else { return Ok(None) };
    let encoding = header.line_encoding();
    let base = header.opcode_base();
    // Opcode 0 starts an extended opcode whatever the base (a base of 0 does not parse anyway).
    let first_special = base.max(1);
    // How far each special opcode moves the address (DWARF 5 section 6.2.5.1), filled by counting, not dividing:
    // this runs for every unit that declares no ranges, most with tiny programs.
    let mut special = [0u64; 256];
    let (mut by, mut in_step) = (0u64, 0u8);
    for slot in &mut special[usize::from(base)..] {
        *slot = by;
        in_step += 1;
        if in_step == encoding.line_range {
            (by, in_step) = (by.wrapping_add(machine.min_len), 0);
        }
    }
    // What the loop below needs to know of each opcode: whether it makes a row, whether it takes one LEB128
    // operand, or whether it is left to `Machine::step` (`SLOW`); how far it moves the address: `special`, plus
    // `scale` times its operand (DW_LNS_advance_pc's, taken only when one byte long).
    const ROW: u8 = 1;
    const OPERAND: u8 = 2;
    const SLOW: u8 = 4;
    let mut classes = [SLOW; 256];
    let mut scale = [0u64; 256];
    for op in 1..base.min(13) {
        classes[usize::from(op)] = match gimli::DwLns(op) {
            gimli::DW_LNS_copy => ROW,
            gimli::DW_LNS_advance_line | gimli::DW_LNS_set_file | gimli::DW_LNS_set_column | gimli::DW_LNS_set_isa => {
                OPERAND
            }
            gimli::DW_LNS_advance_pc => {
                scale[usize::from(op)] = machine.min_len;
                OPERAND
            }
            gimli::DW_LNS_const_add_pc => {
                special[usize::from(op)] = machine.const_add_pc();
                0
            }
            gimli::DW_LNS_negate_stmt
            | gimli::DW_LNS_set_basic_block
            | gimli::DW_LNS_set_prologue_end
            | gimli::DW_LNS_set_epilogue_begin => 0,
            _ => SLOW,
        };
    }
    for class in &mut classes[usize::from(first_special)..] {
        *class = ROW;
    }
    // Bit n set: opcode n (below 64) takes one LEB128 operand.
    let operands = classes[..64].iter().rev().fold(0u64, |bits, &class| bits << 1 | u64::from(class & OPERAND != 0));
    let program = header.raw_program_buf();
    let endian = program.endian();
    let mut input = gimli::EndianSlice::new(program.bytes(), endian);
    let mut out = Vec::new();
    // The address of the current sequence's first row.
    let mut start = None;
    while !input.is_empty() {
        // Outside tombstoned code, the instructions that take no operand, or a LEB128 operand of one byte or (when
        // its value is not needed) two, which cannot be malformed, run here with one rarely taken branch: `&` and
        // `|`, not `&&` and `||`, so that the kind of each opcode is not a branch of its own.
        if !machine.tombstone {
            let bytes = input.slice();
            let mut i = 0;
            while i + 2 < bytes.len() {
                let opcode = bytes[i];
                let (class, operand) = (classes[usize::from(opcode)], bytes[i + 1]);
                let long = operand >= 0x80;
                let leave = (class & SLOW != 0)
                    | ((class & OPERAND != 0) & long & ((scale[usize::from(opcode)] != 0) | (bytes[i + 2] >= 0x80)));
                if leave {
                    break;
                }
                // The operand's presence from a bit mask rather than from `class`: the next opcode's position is
                // what each step waits for, and a shift is quicker than a second load.
                let has = ((operands >> (opcode & 63)) & u64::from(opcode < 64)) as usize;
                i += 1 + has + (has & usize::from(long));
                machine.address =
                    machine.advanced(special[usize::from(opcode)] + scale[usize::from(opcode)] * u64::from(operand))?;
                if class & ROW != 0 && start.is_none() {
                    start = Some(machine.address);
                }
            }
            input = gimli::EndianSlice::new(&bytes[i..], endian);
        }
        let Some((&opcode, rest)) = input.slice().split_first() else { break };
        input = gimli::EndianSlice::new(rest, endian);
        match machine.step(opcode, &mut input)? {
            Step::Row { end: false, .. } => {
                if !machine.tombstone {
                    start.get_or_insert(machine.address);
                }
            }
            Step::Row { end: true, .. } => {
                if !machine.tombstone {
                    if let Some(s) = start.take() {
                        out.push((s, machine.address));
                    }
                }
                machine.reset();
            }
            Step::DefineFile => return Ok(None),
            Step::Line(_) | Step::File(_) | Step::Nothing => {}
        }
    }
    Ok(Some(out))
}

/// Checks that every file name of a line program renders, as `addr2line` renders them all (a failure makes its
/// whole line table fail).
fn check_files(unit: gimli::UnitRef<'_, Reader>, header: &gimli::LineProgramHeader<Reader>) -> Result<()> {
    let mut index = 1;
    while let Some(file) = header.file(index) {
        check_file(unit, file, header)?;
        index += 1;
    }
    if let Some(file) = header.file(0) {
        check_file(unit, file, header)?;
    }
    Ok(())
}

/// Compares [`run_fast`] with `gimli`'s `LineRows` on every unit whose line program it decodes: the same rows
/// (address, file, line, end of sequence) or the same failure; and [`sequence_bounds`] with the sequences
/// `addr2line` makes of `gimli`'s rows. Returns how many units it compared, or the first that differs.
pub(super) fn check_run_fast(dwarf: &gimli::Dwarf<Reader>) -> std::result::Result<usize, String> {
    let mut units = dwarf.units();
    let mut compared = 0;
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else { continue };
        let Some(program) = unit.line_program.clone() else { continue };
        match check_program(program) {
            Ok(true) => compared += 1,
            Ok(false) => {}
            Err(e) => return Err(format!("unit at {:?}: {e}", unit.header.offset())),
        }
    }
    Ok(compared)
}

/// Checks the units as listing reads them ([`listed_unit`]: the cut abbreviation table, [`lean_unit`], the line
/// program parsed later by [`ListedUnit::parse_line_program`]) against `gimli::Dwarf::unit` on every unit of
/// `dwarf` that `gimli` reads: the same bases, `DW_AT_low_pc` and split-DWARF id, and the same line program header
/// (offset, version, length, directories and files, the first directory and file). Returns the number of units
/// compared, or the first difference (tests).
pub(super) fn check_lean_units(dwarf: &gimli::Dwarf<Reader>) -> std::result::Result<usize, String> {
    let mut headers = dwarf.units();
    let mut roots = RootAbbreviations::new();
    let mut compared = 0;
    while let Ok(Some(header)) = headers.next() {
        let Ok(want) = dwarf.unit(header.clone()) else { continue };
        let at = header.offset();
        let mut got = listed_unit(dwarf, header, &mut roots).ok_or(format!("unit at {at:?}: not listed"))?;
        got.parse_line_program(dwarf);
        let (w, g) = (&want, &got.unit);
        let same = (w.low_pc, w.addr_base, w.rnglists_base, w.loclists_base, w.str_offsets_base, w.dwo_id)
            == (g.low_pc, g.addr_base, g.rnglists_base, g.loclists_base, g.str_offsets_base, g.dwo_id);
        if !same {
            return Err(format!("unit at {at:?}: the unit DIE's values differ from gimli's"));
        }
        let shape = |unit: &gimli::Unit<Reader>| {
            let header = unit.line_program.as_ref()?.header();
            let text = |v: Option<gimli::AttributeValue<Reader>>| {
                v.and_then(|v| dwarf.attr_string(unit, v).ok()).and_then(|r| r.to_slice().ok().map(|b| b.to_vec()))
            };
            Some((
                header.offset(),
                header.version(),
                header.raw_program_buf().len(),
                header.include_directories().len(),
                header.file_names().len(),
                text(header.directory(0)),
                text(header.file(0).map(|f| f.path_name())),
            ))
        };
        if shape(&want) != shape(&got.unit) {
            return Err(format!("unit at {at:?}: the line program differs from gimli's"));
        }
        compared += 1;
    }
    Ok(compared)
}

/// [`check_run_fast`] for one line program: `Ok(false)` when [`run_fast`] leaves it to `gimli`.
fn check_program(program: gimli::IncompleteLineProgram<Reader>) -> std::result::Result<bool, String> {
    let mut fast = Vec::new();
    let fast = match run_fast(program.header(), |r| fast.push(r)) {
        Ok(None) => return Ok(false),
        Ok(Some(())) => Ok(fast),
        Err(e) => Err(e),
    };
    let bounds = sequence_bounds(program.header());
    let mut rows = program.rows();
    let mut slow = Vec::new();
    let slow = loop {
        match rows.next_row() {
            Ok(Some((_, r))) => {
                slow.push((r.address(), r.file_index(), r.line().map_or(0, |l| l.get()), r.end_sequence()))
            }
            Ok(None) => break Ok(slow),
            Err(e) => break Err(e),
        }
    };
    // The sequences `addr2line` makes of gimli's rows: from a sequence's first row to its end row.
    let expected = slow.as_ref().ok().map(|rows| {
        let (mut sequences, mut start) = (Vec::new(), None);
        for &(address, _, _, end) in rows {
            match (end, start) {
                (true, Some(s)) => {
                    sequences.push((s, address));
                    start = None;
                }
                (true, None) => {}
                (false, _) => {
                    start.get_or_insert(address);
                }
            }
        }
        sequences
    });
    match (&bounds, &expected) {
        (Ok(Some(a)), Some(b)) if a == b => {}
        (Err(_), None) => {}
        _ => {
            let first_difference = match (&bounds, &expected) {
                (Ok(Some(a)), Some(b)) => {
                    (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)).map(|i| (i, a.get(i), b.get(i)))
                }
                _ => None,
            };
            return Err(format!(
                "sequence bounds {:?}, from gimli's rows {:?}; first difference (index, bounds, gimli) \
                 {first_difference:?}",
                bounds.as_ref().map(|b| b.as_ref().map(Vec::len)),
                expected.as_ref().map(Vec::len),
            ));
        }
    }
    match (fast, slow) {
        (Ok(a), Ok(b)) if a == b => Ok(true),
        (Err(_), Err(_)) => Ok(true),
        (a, b) => {
            let brief = |r: std::result::Result<Vec<Row>, gimli::Error>| match r {
                Ok(v) => format!("{} rows, first {:?}", v.len(), v.first()),
                Err(e) => format!("error {e}"),
            };
            Err(format!("fast {}, gimli {}", brief(a), brief(b)))
        }
    }
}

/// What one run of a unit's line program gives.
struct Sweep {
    /// `(start, end)` of each sequence with rows, in program order.
    sequences: Vec<(u64, u64)>,
    /// `(probe position, sequence number, row found)` for every probe inside a sequence; the row is
    /// `(file index, line)`, `None` when the probe precedes the sequence's first row.
    hits: Vec<Hit>,
    /// The line program's header after the run (DWARF 4 programs can define files as they go); kept only when
    /// there were probes.
    header: Option<gimli::LineProgramHeader<Reader>>,
}

/// Runs a unit's line program once, recording the row of every probe (`probes` sorted) in every sequence that
/// holds it. Fails, as `addr2line`'s line table does, when the program or one of its file names does not parse.
fn sweep_lines(unit: gimli::UnitRef<'_, Reader>, probes: &[u64]) -> Result<Sweep> {
    let mut out = Sweep { sequences: Vec::new(), hits: Vec::new(), header: None };
    let Some(program) = unit.line_program.clone() else { return Ok(out) };
    // The current sequence: (address, file index, line), a row at the same address as the previous one replacing it.
    let mut seq: Vec<(u64, u64, u32)> = Vec::new();
    let on_row = |out: &mut Sweep, seq: &mut Vec<(u64, u64, u32)>, (address, file, line, end): Row| {
        if end {
            if let Some(&(start, _, _)) = seq.first() {
                let n = out.sequences.len();
                out.sequences.push((start, address));
                let first = probes.partition_point(|&p| p < start);
                for (k, &p) in probes.iter().enumerate().skip(first).take_while(|(_, &p)| p < address) {
                    let row = match seq.binary_search_by(|r| r.0.cmp(&p)) {
                        Ok(i) => Some(i),
                        Err(0) => None,
                        Err(i) => Some(i - 1),
                    };
                    out.hits.push((k, n, row.map(|i| (seq[i].1, seq[i].2))));
                }
                seq.clear();
            }
            return;
        }
        // addr2line keeps lines as u32.
        let line = line as u32;
        match seq.last_mut() {
            Some(last) if last.0 == address => *last = (address, file, line),
            // Without probes only the sequence's start is needed (listing a unit without ranges).
            Some(_) if probes.is_empty() => {}
            _ => seq.push((address, file, line)),
        }
    };
    // The header as the run left it: the program's own, unless gimli's run had to take over (DWARF 4 programs
    // can define files as they go).
    let fast = if probes.is_empty() {
        sequence_bounds(program.header())?.map(|bounds| out.sequences = bounds)
    } else {
        run_fast(program.header(), |r| on_row(&mut out, &mut seq, r))?
    };
    let after_gimli = if fast.is_some() {
        None
    } else {
        // Not for the fast decoder: start again with gimli's.
        out.sequences.clear();
        out.hits.clear();
        seq.clear();
        let mut rows = program.clone().rows();
        while let Some((_, row)) = rows.next_row()? {
            let line = row.line().map_or(0, |l| l.get());
            on_row(&mut out, &mut seq, (row.address(), row.file_index(), line, row.end_sequence()));
        }
        Some(rows.header().clone())
    };
    // Every file name must render, as addr2line renders them all (a failure makes its whole table fail).
    check_files(unit, after_gimli.as_ref().unwrap_or(program.header()))?;
    // Only answers need the header (for file names); listing a unit's ranges does not keep it.
    if !probes.is_empty() {
        out.header = Some(after_gimli.unwrap_or_else(|| program.header().clone()));
    }
    Ok(out)
}

fn check_file(
    unit: gimli::UnitRef<'_, Reader>,
    file: &gimli::FileEntry<Reader>,
    header: &gimli::LineProgramHeader<Reader>,
) -> Result<()> {
    if file.directory_index() != 0 {
        if let Some(dir) = file.directory(header) {
            unit.attr_string(dir)?;
        }
    }
    unit.attr_string(file.path_name())?;
    Ok(())
}

/// The file name of file `index` of a unit's line program, as `addr2line` renders it: the unit's
/// `DW_AT_comp_dir`, the file's directory (unless it is entry 0) and its name, each absolute one replacing what
/// came before. Index 0 without an entry (DWARF 4 and earlier) is the empty name.
fn render_file(
    unit: gimli::UnitRef<'_, Reader>,
    header: &gimli::LineProgramHeader<Reader>,
    index: u64,
) -> Result<Option<String>> {
    let Some(file) = header.file(index) else { return Ok((index == 0).then(String::new)) };
    let mut path = match &unit.comp_dir {
        Some(dir) => dir.to_string_lossy()?.into_owned(),
        None => String::new(),
    };
    if file.directory_index() != 0 {
        if let Some(dir) = file.directory(header) {
            push_path(&mut path, &unit.attr_string(dir)?.to_string_lossy()?);
        }
    }
    push_path(&mut path, &unit.attr_string(file.path_name())?.to_string_lossy()?);
    Ok(Some(path))
}

/// Appends `part` to `path` with the separator `path` uses; an absolute `part` (Unix or Windows) replaces it.
fn push_path(path: &mut String, part: &str) {
    let unix_root = |p: &str| p.starts_with('/') || p.get(1..3) == Some(":/");
    let windows_root = |p: &str| p.starts_with('\\') || p.get(1..3) == Some(":\\");
    if unix_root(part) || windows_root(part) {
        *path = part.to_string();
        return;
    }
    let sep = if windows_root(path) { '\\' } else { '/' };
    if !path.is_empty() && !path.ends_with(sep) {
        path.push(sep);
    }
    path.push_str(part);
}

/// The name of a DIE: read, or still to be read from the one DIE its only name attribute
/// (`DW_AT_abstract_origin` or `DW_AT_specification`) refers to. Most inlined subroutines are never on the chain
/// of a probe, so their names are read only when they are (a reference that does not resolve is therefore only
/// noticed then; `addr2line` notices it when it reads the function, and answers nothing for any address in it).
enum Name {
    Known(Option<Reader>),
    Origin(gimli::AttributeValue<Reader>),
}

/// A `DW_TAG_inlined_subroutine`: name and call site.
struct Inlined {
    offset: gimli::UnitOffset,
    name: Name,
    call_file: Option<u64>,
    call_line: u32,
}

/// A `DW_TAG_subprogram` that holds a probe: its name and its inlined subroutines.
struct Function {
    offset: gimli::UnitOffset,
    name: Option<Reader>,
    inlined: Vec<Inlined>,
    /// `(range, inline depth, index into inlined)`, sorted by depth, then start.
    inlined_ranges: Vec<(gimli::Range, usize, usize)>,
}

/// Reading one unit's DIEs.
struct UnitReader<'a> {
    index: &'a Index,
    dwarf: &'a gimli::Dwarf<Reader>,
    unit: gimli::UnitRef<'a, Reader>,
}

impl UnitReader<'_> {
    /// Every `DW_TAG_subprogram` with an address range: `(DIE offsets, (range, index into the offsets))`, the
    /// ranges sorted by start.
    fn functions(&self) -> Result<Functions> {
        let (mut offsets, mut ranges) = (Vec::new(), Vec::new());
        let mut entries = self.unit.entries_raw(None)?;
        while !entries.is_empty() {
            let offset = entries.next_offset();
            let Some(abbrev) = entries.read_abbreviation()? else { continue };
            if abbrev.tag() != gimli::DW_TAG_subprogram {
                entries.skip_attributes(abbrev.attributes())?;
                continue;
            }
            let mut attrs = RangeAttrs::default();
            for spec in abbrev.attributes() {
                let attr = entries.read_attribute(*spec)?;
                attrs.read(self.unit, &attr)?;
            }
            let n = offsets.len();
            if attrs.for_each(self.unit, |r| ranges.push((r, n)))? {
                offsets.push(offset);
            }
        }
        ranges.sort_by_key(|r| r.0.begin);
        Ok((offsets, ranges))
    }

    /// Reads the function at `offset`: name and inlined subroutines.
    fn function(&self, offset: gimli::UnitOffset) -> Result<Function> {
        let mut entries = self.unit.entries_raw(Some(offset))?;
        let depth = entries.next_depth();
        let abbrev = entries.read_abbreviation()?.ok_or(gimli::Error::NoEntryAtGivenOffset)?;
        let mut name = None;
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec)?;
            self.read_name(&attr, &mut name)?;
        }
        let mut f = Function { offset, name, inlined: Vec::new(), inlined_ranges: Vec::new() };
        self.children(&mut entries, depth, 0, &mut f)?;
        f.inlined_ranges.sort_by_key(|r| (r.1, r.0.begin));
        Ok(f)
    }

    /// Applies a name attribute: a linkage name wins, then `DW_AT_name`, then the origin's or specification's.
    fn read_name(&self, attr: &gimli::Attribute<Reader>, name: &mut Option<Reader>) -> Result<()> {
        match attr.name() {
            gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                if let Ok(v) = self.unit.attr_string(attr.value()) {
                    *name = Some(v);
                }
            }
            gimli::DW_AT_name if name.is_none() => *name = self.unit.attr_string(attr.value()).ok(),
            gimli::DW_AT_abstract_origin | gimli::DW_AT_specification if name.is_none() => {
                *name = name_from(self.index, self.dwarf, self.unit, attr.value(), 16)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Reads the DIEs below `depth`: inlined subroutines (at `inline_depth`) and, inside them, deeper ones;
    /// nested subprograms are skipped whole.
    fn children(
        &self,
        entries: &mut gimli::EntriesRaw<'_, '_, Reader>,
        depth: isize,
        inline_depth: usize,
        f: &mut Function,
    ) -> Result<()> {
        loop {
            let offset = entries.next_offset();
            let next_depth = entries.next_depth();
            if next_depth <= depth {
                return Ok(());
            }
            let Some(abbrev) = entries.read_abbreviation()? else { continue };
            match abbrev.tag() {
                gimli::DW_TAG_subprogram => {
                    entries.skip_attributes(abbrev.attributes())?;
                    while entries.next_depth() > next_depth {
                        if let Some(a) = entries.read_abbreviation()? {
                            entries.skip_attributes(a.attributes())?;
                        }
                    }
                }
                gimli::DW_TAG_inlined_subroutine => {
                    let mut attrs = RangeAttrs::default();
                    let mut inl = Inlined { offset, name: Name::Known(None), call_file: None, call_line: 0 };
                    // Name attributes in order; a lone origin/specification is kept for later.
                    let (mut name, mut origin, mut names) = (None, None, 0);
                    for spec in abbrev.attributes() {
                        let attr = entries.read_attribute(*spec)?;
                        if attrs.read(self.unit, &attr)? {
                            continue;
                        }
                        match attr.name() {
                            gimli::DW_AT_call_file => {
                                // DWARF 5 numbers files from 0; before, 0 means no file.
                                if let gimli::AttributeValue::FileIndex(fi) = attr.value() {
                                    if fi > 0 || self.unit.header.version() >= 5 {
                                        inl.call_file = Some(fi);
                                    }
                                }
                            }
                            gimli::DW_AT_call_line => inl.call_line = attr.udata_value().unwrap_or(0) as u32,
                            gimli::DW_AT_abstract_origin | gimli::DW_AT_specification if names == 0 => {
                                names += 1;
                                origin = Some(attr);
                            }
                            gimli::DW_AT_linkage_name
                            | gimli::DW_AT_MIPS_linkage_name
                            | gimli::DW_AT_name
                            | gimli::DW_AT_abstract_origin
                            | gimli::DW_AT_specification => {
                                names += 1;
                                if let Some(o) = origin.take() {
                                    self.read_name(&o, &mut name)?;
                                }
                                self.read_name(&attr, &mut name)?;
                            }
                            _ => {}
                        }
                    }
                    inl.name = match origin {
                        Some(o) => Name::Origin(o.value()),
                        None => Name::Known(name),
                    };
                    let n = f.inlined.len();
                    f.inlined.push(inl);
                    attrs.for_each(self.unit, |r| f.inlined_ranges.push((r, inline_depth, n)))?;
                    self.children(entries, next_depth, inline_depth + 1, f)?;
                }
                _ => entries.skip_attributes(abbrev.attributes())?,
            }
        }
    }
}

/// The name a `DW_AT_abstract_origin`/`DW_AT_specification` value leads to (following up to `limit` links).
fn name_from(
    index: &Index,
    dwarf: &gimli::Dwarf<Reader>,
    unit: gimli::UnitRef<'_, Reader>,
    value: gimli::AttributeValue<Reader>,
    limit: usize,
) -> Result<Option<Reader>> {
    if limit == 0 {
        return Ok(None);
    }
    let (unit, offset) = match value {
        gimli::AttributeValue::UnitRef(off) => (unit, off),
        gimli::AttributeValue::DebugInfoRef(off) => {
            let (u, at) = index.unit_at(dwarf, off)?;
            (gimli::UnitRef::new(dwarf, u), at)
        }
        // No supplementary object file is ever loaded.
        _ => return Ok(None),
    };
    let mut entries = unit.entries_raw(Some(offset))?;
    let abbrev = entries.read_abbreviation()?.ok_or(gimli::Error::NoEntryAtGivenOffset)?;
    let (mut name, mut next) = (None, None);
    for spec in abbrev.attributes() {
        let attr = entries.read_attribute(*spec)?;
        match attr.name() {
            gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                if let Ok(v) = unit.attr_string(attr.value()) {
                    return Ok(Some(v));
                }
            }
            gimli::DW_AT_name => {
                if let Ok(v) = unit.attr_string(attr.value()) {
                    name = Some(v);
                }
            }
            gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => next = Some(attr.value()),
            _ => {}
        }
    }
    match (name, next) {
        (Some(n), _) => Ok(Some(n)),
        (None, Some(next)) => name_from(index, dwarf, unit, next, limit - 1),
        (None, None) => Ok(None),
    }
}

/// A frame's source location before it becomes a [`SymbolInfo`]: file name and line.
struct Location {
    file: Option<String>,
    line: Option<u32>,
}

/// Units at least this long (bytes of `.debug_info`, header included) read their DIEs and their line program on two
/// threads ([`resolve_unit`]); below it a thread costs more than it saves.
const SIDE_BY_SIDE_MIN: usize = 128 * 1024;

/// Resolves the probes of one unit (`queries`: `(query index, probe)` sorted by probe); pushes `(query index,
/// DWARF frames)` for each, `None` for those left to `addr2line`. `names`: the thread's demangled names.
fn resolve_unit(
    index: &Index,
    dwarf: &gimli::Dwarf<Reader>,
    unit_id: usize,
    queries: &[(usize, u64)],
    addresses: &[(u64, u64)],
    names: &mut NameCache,
    out: &mut Vec<(usize, Option<Vec<SymbolInfo>>)>,
) -> Result<()> {
    let unit = index.full(dwarf, unit_id)?;
    if unit.dwo_id.is_some() {
        out.extend(queries.iter().map(|q| (q.0, None)));
        return Ok(());
    }
    let reader = UnitReader { index, dwarf, unit: gimli::UnitRef::new(dwarf, unit) };
    let probes: Vec<u64> = queries.iter().map(|q| q.1).collect();
    // The unit's two passes, over its DIEs and over its line program, read different sections: for a big unit they
    // run side by side. (The benchmark's report has one unit of 816 KB whose passes take about 2 ms each, the
    // longest piece of its lookup; side by side, the lookup took 3.0 instead of 3.8 ms, medians of 6 runs.) A panic
    // in the line pass fails the unit as a parser panic does.
    let side_by_side = unit.header.length_including_self() >= SIDE_BY_SIDE_MIN;
    let (functions, sweep) = std::thread::scope(|scope| {
        // No thread to be had: one pass after the other.
        let lines = side_by_side
            .then(|| std::thread::Builder::new().spawn_scoped(scope, || sweep_lines(reader.unit, &probes)).ok())
            .flatten();
        let functions = reader.functions();
        let sweep = match lines {
            Some(lines) => lines.join().unwrap_or(Err(gimli::Error::InvalidAddressRange)),
            None => sweep_lines(reader.unit, &probes),
        };
        (functions, sweep)
    });
    let ((offsets, ranges), sweep) = (functions?, sweep?);
    // The sequence each probe's row comes from: addr2line's search over the sequences sorted by start.
    let mut sorted: Vec<(u64, u64, usize)> = sweep.sequences.iter().enumerate().map(|(i, s)| (s.0, s.1, i)).collect();
    sorted.sort_by_key(|s| s.0);
    // The hits come sequence by sequence; in probe order (a stable sort keeps the sequences' order per probe).
    let mut hits = sweep.hits;
    hits.sort_by_key(|h| h.0);
    let mut hits = hits.iter().peekable();
    let header = sweep.header.as_ref();
    let mut files: HashMap<u64, Option<String>> = HashMap::new();
    let mut file_name = |i: u64| -> Result<Option<String>> {
        let Some(header) = header else { return Ok(None) };
        if let Some(f) = files.get(&i) {
            return Ok(f.clone());
        }
        let f = render_file(reader.unit, header, i)?;
        files.insert(i, f.clone());
        Ok(f)
    };
    let mut functions: HashMap<usize, Option<Function>> = HashMap::new();
    // Names read through origins: (the reference is a `.debug_info` offset, offset) to name.
    let mut origins: HashMap<(bool, usize), Option<Reader>> = HashMap::new();
    for (k, &(qi, probe)) in queries.iter().enumerate() {
        let seq = sorted
            .binary_search_by(|s| {
                if probe < s.0 {
                    Ordering::Greater
                } else if probe >= s.1 {
                    Ordering::Less
                } else {
                    Ordering::Equal
                }
            })
            .ok()
            .map(|i| sorted[i].2);
        let mut row = None;
        while let Some(&&(hk, hs, hrow)) = hits.peek() {
            if hk > k {
                break;
            }
            if hk == k && Some(hs) == seq {
                row = Some(hrow);
            }
            hits.next();
        }
        let location = match row.flatten() {
            Some((file, line)) => Some(Location { file: file_name(file)?, line: (line != 0).then_some(line) }),
            None => None,
        };
        let function = ranges
            .binary_search_by(|(r, _)| {
                if probe < r.begin {
                    Ordering::Greater
                } else if probe >= r.end {
                    Ordering::Less
                } else {
                    Ordering::Equal
                }
            })
            .ok()
            .map(|i| ranges[i].1);
        let Some(fi) = function else {
            match location {
                // addr2line would try the next unit that covers the probe.
                None => out.push((qi, None)),
                Some(l) => out.push((qi, Some(vec![frame(String::new(), None, l)]))),
            }
            continue;
        };
        let f = match functions.entry(fi) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(reader.function(offsets[fi]).ok()),
        };
        let Some(f) = f.as_ref() else {
            out.push((qi, None));
            continue;
        };
        let address = addresses[qi].0;
        let start = |off: gimli::UnitOffset| die_start(&reader.unit, probe, off).map(|s| address.wrapping_sub(s));
        let mut frames = Vec::new();
        let mut loc = location;
        let mut failed = false;
        for inl in inlined_chain(f, probe).into_iter().rev() {
            let here = loc.take().unwrap_or(Location { file: None, line: None });
            let name = match &inl.name {
                Name::Known(n) => n.clone(),
                Name::Origin(value) => {
                    let key = match value {
                        gimli::AttributeValue::UnitRef(o) => Some((false, o.0)),
                        gimli::AttributeValue::DebugInfoRef(o) => Some((true, o.0)),
                        _ => None,
                    };
                    match key.and_then(|k| origins.get(&k)) {
                        Some(n) => n.clone(),
                        None => {
                            let Ok(n) = name_from(index, dwarf, reader.unit, value.clone(), 16) else {
                                failed = true;
                                break;
                            };
                            if let Some(k) = key {
                                origins.insert(k, n.clone());
                            }
                            n
                        }
                    }
                }
            };
            frames.push(frame(demangled(names, name.as_ref())?, start(inl.offset), here));
            let file = match inl.call_file {
                Some(cf) => file_name(cf)?,
                None => None,
            };
            loc = Some(Location { file, line: (inl.call_line != 0).then_some(inl.call_line) });
        }
        if failed {
            // A name reference that does not resolve: addr2line answers nothing for the function.
            out.push((qi, None));
            continue;
        }
        let name = demangled(names, f.name.as_ref())?;
        frames.push(frame(name, start(f.offset), loc.unwrap_or(Location { file: None, line: None })));
        out.push((qi, Some(frames)));
    }
    Ok(())
}

/// The inlined subroutines holding `probe`, outermost first.
fn inlined_chain(f: &Function, probe: u64) -> Vec<&Inlined> {
    let mut chain = Vec::new();
    let mut rest = &f.inlined_ranges[..];
    loop {
        let depth = chain.len();
        let found = rest.binary_search_by(|(r, d, _)| {
            d.cmp(&depth).then(if r.begin > probe {
                Ordering::Greater
            } else if r.end <= probe {
                Ordering::Less
            } else {
                Ordering::Equal
            })
        });
        let Ok(i) = found else { return chain };
        chain.push(&f.inlined[rest[i].2]);
        rest = &rest[i + 1..];
    }
}

/// Demangled names already made by one thread, by where the raw name lies in the file (the linker merges equal
/// strings of `.debug_str`, so a name is mostly at one place).
type NameCache = HashMap<(usize, usize), String>;

/// The demangled form of a raw DWARF name (empty without one), through `names`.
fn demangled(names: &mut NameCache, raw: Option<&Reader>) -> Result<String> {
    let Some(raw) = raw else { return Ok(String::new()) };
    let key = (raw.bytes().as_ptr() as usize, raw.len());
    if let Some(n) = names.get(&key) {
        return Ok(n.clone());
    }
    let n = demangle::demangle(&raw.to_string_lossy()?);
    names.insert(key, n.clone());
    Ok(n)
}

/// One DWARF frame as [`super::dwarf_frames`] makes it from an `addr2line` frame (`name` demangled).
fn frame(name: String, offset: Option<u64>, location: Location) -> SymbolInfo {
    let line = location.file.as_ref().map(|_| u64::from(location.line.unwrap_or(0)));
    SymbolInfo { name, offset, file: location.file, line, file_verbatim: false }
}

/// A file's DWARF with its units listed: what [`lookup`] needs, built once per file and kept for the next batch
/// (the listing is most of a small batch's cost: it runs the line program of every unit that declares no ranges).
pub(super) struct Units {
    dwarf: gimli::Dwarf<Reader>,
    index: Index,
}

impl Units {
    /// Lists the units of `dwarf` on up to `threads` threads; `None` when they cannot be listed (the DWARF does
    /// not parse, or a parser panicked).
    pub(super) fn new(dwarf: gimli::Dwarf<Reader>, threads: usize) -> Option<Units> {
        let index =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Index::parse(&dwarf, threads))).ok()?.ok()?;
        Some(Units { dwarf, index })
    }
}

/// Resolves `queries` (`(address, probe)`, any order) on up to `threads` threads. Returns one entry per query, in
/// order: the finished frames, or `None` for a query left to `addr2line`.
pub(super) fn lookup(
    units: &Units,
    symbols: &SymbolTable,
    queries: &[(u64, u64)],
    threads: usize,
) -> Vec<Option<Vec<SymbolInfo>>> {
    let (dwarf, index) = (&units.dwarf, &units.index);
    let mut out: Vec<Option<Vec<SymbolInfo>>> = vec![None; queries.len()];
    // (first unit, probe, query index), sorted: each unit's probes in a row, in address order.
    let mut order: Vec<(usize, u64, usize)> = Vec::with_capacity(queries.len());
    for (i, &(address, probe)) in queries.iter().enumerate() {
        match index.first_unit(probe) {
            Some(u) => order.push((u, probe, i)),
            // No unit: addr2line finds no frame either, unless the probe is in dropped code's line program (see the
            // module's documentation). A probe of u64::MAX is left to it.
            None if probe != u64::MAX => out[i] = Some(symbols.finish_lookup(Vec::new(), address, probe)),
            None => {}
        }
    }
    order.sort_unstable();
    // One work item per unit: (unit, its probes), biggest unit first.
    let mut work: Vec<(usize, Vec<(usize, u64)>)> = Vec::new();
    for &(u, probe, i) in &order {
        match work.last_mut() {
            Some((wu, list)) if *wu == u => list.push((i, probe)),
            _ => work.push((u, vec![(i, probe)])),
        }
    }
    work.sort_by_key(|(u, _)| std::cmp::Reverse(index.units[*u].header.length_including_self()));
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    let run = || {
        let mut mine = Vec::new();
        let mut names = NameCache::new();
        loop {
            let w = next.fetch_add(1, AtomicOrdering::Relaxed);
            let Some((u, list)) = work.get(w) else { break };
            let mut got = Vec::with_capacity(list.len());
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                resolve_unit(index, dwarf, *u, list, queries, &mut names, &mut got)
            }));
            match ok {
                Ok(Ok(())) => mine.extend(got.into_iter().map(|(i, frames)| {
                    let (address, probe) = queries[i];
                    (i, frames.map(|f| symbols.finish_lookup(f, address, probe)))
                })),
                // The unit's DWARF did not parse (or a parser panicked): addr2line answers for it.
                _ => mine.extend(list.iter().map(|q| (q.0, None))),
            }
        }
        if let Ok(mut r) = results.lock() {
            r.push(mine);
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads.clamp(1, 8).min(work.len().max(1)) {
            scope.spawn(run);
        }
        run();
    });
    // Each unit's work runs under `catch_unwind`, so no thread holding the lock panics; were it poisoned anyway,
    // the queries it holds would be left to `addr2line`.
    for (i, frames) in results.into_inner().unwrap_or_default().into_iter().flatten() {
        out[i] = frames;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A DWARF 4 `.debug_line` unit (32-bit DWARF, 8-byte addresses, little endian): one directory-less file and
    /// `program`. `lengths`: the operand counts of standard opcodes 1 to `opcode_base - 1`.
    fn line_unit(min_len: u8, line_base: i8, line_range: u8, lengths: &[u8], program: &[u8]) -> Vec<u8> {
        let mut header = vec![min_len, 1, 1, line_base as u8, line_range, lengths.len() as u8 + 1];
        header.extend_from_slice(lengths);
        header.push(0); // no include directories
        header.extend_from_slice(b"a.c\0\0\0\0\0"); // one file: name, directory 0, time 0, size 0; then the end
        let mut unit = Vec::new();
        unit.extend_from_slice(&((2 + 4 + header.len() + program.len()) as u32).to_le_bytes());
        unit.extend_from_slice(&4u16.to_le_bytes());
        unit.extend_from_slice(&(header.len() as u32).to_le_bytes());
        unit.extend_from_slice(&header);
        unit.extend_from_slice(program);
        unit
    }

    /// One instruction of a generated program: mostly well formed, sometimes not.
    fn instruction() -> impl Strategy<Value = Vec<u8>> {
        let address = prop_oneof![0u64..0x2000, Just(u64::MAX), Just(u64::MAX - 1), (u64::MAX - 300)..u64::MAX];
        prop_oneof![
            4 => (13u8..=255).prop_map(|op| vec![op]),
            2 => (1u8..=12, 0u8..=255, 0u8..=255).prop_map(|(op, a, b)| vec![op, a, b]),
            2 => (1u8..=12, 0u8..0x80).prop_map(|(op, a)| vec![op, a]),
            1 => address.prop_map(|a| {
                let mut v = vec![0, 9, 2];
                v.extend_from_slice(&a.to_le_bytes());
                v
            }),
            1 => Just(vec![0, 1, 1]),
            1 => (0u8..=255, 0u8..=255).prop_map(|(len, op)| vec![0, len, op]),
            1 => proptest::collection::vec(any::<u8>(), 1..6),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// On generated line programs (header values of any kind, instructions mostly well formed), the
        /// address-only decoder gives the sequences `addr2line` makes of `gimli`'s rows, the row decoder gives
        /// `gimli`'s rows, or all fail; nothing panics.
        #[test]
        fn the_line_decoders_agree_with_gimli(
            min_len in 1u8..=4,
            line_base in -5i8..=1,
            line_range in 1u8..=16,
            lengths in prop_oneof![
                3 => Just(vec![0u8, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1]),
                1 => proptest::collection::vec(0u8..=2, 0..20),
            ],
            instructions in proptest::collection::vec(instruction(), 0..60),
        ) {
            let program: Vec<u8> = instructions.concat();
            let unit = line_unit(min_len, line_base, line_range, &lengths, &program);
            let section = gimli::DebugLine::from(gimli::EndianReader::new(
                super::super::Bytes::new(unit),
                gimli::RunTimeEndian::Little,
            ));
            // A header gimli refuses (an opcode base of 1, say) is not a decoder's business.
            if let Ok(program) = section.program(gimli::DebugLineOffset(0), 8, None, None) {
                prop_assert_eq!(check_program(program).map(|_| ()), Ok(()));
            }
        }
    }
}
