//! Giving back the resident pages of code and read-only data that start-up
//! used: `madvise(MADV_DONTNEED)` on the clean, read-only, file-backed
//! mappings of the process's loaded objects (the executable and its shared
//! libraries), so that its resident set is what it runs from then on.
//!
//! Such a page is a page-cache page of the object's file, mapped into the
//! process. `MADV_DONTNEED` only removes it from the process's page
//! tables: the page stays in the page cache, and the next access maps it
//! back with a minor fault (which, with the kernel's fault-around, maps
//! its cached neighbours too). The kernel may do the same at any time under
//! memory pressure, since such pages are clean, so the process cannot tell
//! the difference but for the time of those minor faults. Unlike
//! `MADV_PAGEOUT`, nothing is evicted from the page cache (no major fault,
//! no disk read, later); unlike `MADV_COLD`, the pages leave the resident
//! set at once.
//!
//! Which mappings: those inside a loaded object's `PT_LOAD` segments that
//! are not writable (`PF_W` clear), outside every `PT_GNU_RELRO` range, and
//! that `/proc/self/smaps` shows private, not writable, not locked, backed
//! by a file (an inode) and without a single anonymous page. The last check
//! leaves out a page the process changed: text relocations, a debugger's
//! breakpoint, a uprobe. Everything is done inside `dl_iterate_phdr(3)`'s
//! callback, which glibc runs under the loader's lock: no object can be
//! mapped or unmapped meanwhile, so no mapping can be replaced between the
//! check and the advice. An object being loaded by a concurrent `dlopen`
//! may be seen before it is relocated, which is harmless since relocation
//! writes only into writable segments, except with text relocations:
//! objects whose dynamic section has `DT_TEXTREL` (or `DF_TEXTREL`) are
//! left alone.
//!
//! # Known issues
//! - The first run of code not run since (a session's set-up, say) takes a
//!   minor fault per 64 KiB or so of it: microseconds, once.
//! - Under memory pressure, an unmapped page-cache page is a little more
//!   likely to be reclaimed than a mapped executable one; the next access
//!   then reads it from disk (a major fault), as it would for a page the
//!   kernel had taken back itself.

use std::ffi::c_void;
use std::io::{self, BufRead};

/// What [`release_clean_code`] gave back.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Mappings advised `MADV_DONTNEED`.
    pub mappings: usize,
    /// Their resident bytes just before.
    pub bytes: u64,
}

/// Drops the clean, read-only pages of the executable and its shared
/// libraries from the process's resident set (see the module docs). Safe
/// to call at any time, from any thread: the pages come back on access.
pub fn release_clean_code() -> io::Result<Released> {
    let mut walk = Walk {
        vmas: None,
        page: page_size()?,
        released: Released::default(),
        error: None,
    };
    // SAFETY: `each_object` matches dl_iterate_phdr's callback type and
    // only casts `data` back to the `Walk` passed here, which outlives the
    // call and is not otherwise used until it returns.
    unsafe {
        libc::dl_iterate_phdr(Some(each_object), (&mut walk as *mut Walk).cast::<c_void>());
    }
    match walk.error {
        Some(e) => Err(e),
        None => Ok(walk.released),
    }
}

fn page_size() -> io::Result<usize> {
    // SAFETY: sysconf takes a constant and returns a long; no memory is
    // passed.
    let rc = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(rc)
        .ok()
        .filter(|p| p.is_power_of_two())
        .ok_or_else(io::Error::last_os_error)
}

/// The state of one `dl_iterate_phdr` walk.
struct Walk {
    /// `/proc/self/smaps`, read in the first callback (under the loader's
    /// lock, which the whole walk holds).
    vmas: Option<Vec<Vma>>,
    page: usize,
    released: Released,
    error: Option<io::Error>,
}

/// `dl_iterate_phdr`'s callback: advises the eligible mappings of one
/// loaded object. Returns non-zero (stop) after an error.
unsafe extern "C" fn each_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut c_void,
) -> libc::c_int {
    // SAFETY: `data` is the `Walk` that `release_clean_code` passed, live
    // and unaliased for the whole walk.
    let walk = unsafe { &mut *data.cast::<Walk>() };
    // SAFETY: dl_iterate_phdr passes a valid `dl_phdr_info` for the
    // duration of the callback.
    let info = unsafe { &*info };
    let phdrs = if info.dlpi_phdr.is_null() {
        &[][..]
    } else {
        // SAFETY: `dlpi_phdr` points to the object's `dlpi_phnum` program
        // headers, mapped for as long as the object is loaded (it cannot be
        // unloaded during the walk).
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let base = usize::try_from(info.dlpi_addr).unwrap_or(0);
    let segments: Vec<Segment> = phdrs
        .iter()
        .filter_map(|p| {
            Some(Segment {
                start: base.checked_add(usize::try_from(p.p_vaddr).ok()?)?,
                len: usize::try_from(p.p_memsz).ok()?,
                read_only: p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_W == 0,
                relro: p.p_type == libc::PT_GNU_RELRO,
            })
            .filter(|s| s.read_only || s.relro)
        })
        .collect();
    for p in phdrs.iter().filter(|p| p.p_type == libc::PT_DYNAMIC) {
        let dynamic = usize::try_from(p.p_vaddr)
            .ok()
            .and_then(|v| base.checked_add(v))
            .filter(|a| *a != 0 && a % std::mem::align_of::<Dyn>() == 0);
        let len = usize::try_from(p.p_memsz).unwrap_or(0) / std::mem::size_of::<Dyn>();
        let Some(dynamic) = dynamic else { return 0 };
        // SAFETY: the object's dynamic section, aligned (checked) and mapped
        // for as long as the object is loaded; `len` entries fit in its
        // `p_memsz`.
        let entries = unsafe { std::slice::from_raw_parts(dynamic as *const Dyn, len) };
        if text_relocations(entries) {
            return 0;
        }
    }
    if walk.vmas.is_none() {
        match std::fs::File::open("/proc/self/smaps")
            .and_then(|f| parse_smaps(std::io::BufReader::new(f)))
        {
            Ok(vmas) => walk.vmas = Some(vmas),
            Err(e) => {
                walk.error = Some(e);
                return 1;
            }
        }
    }
    let vmas = walk.vmas.as_deref().unwrap_or_default();
    for vma in eligible(vmas, &segments, walk.page) {
        // SAFETY: `vma` is a private, read-only, file-backed mapping without
        // anonymous pages, inside a read-only segment of a loaded object that
        // the loader cannot unmap while we hold its lock: every page reads
        // back from the file exactly as it reads now, so dropping it from
        // the page tables changes no byte the program can observe.
        let rc = unsafe {
            libc::madvise(
                vma.start as *mut c_void,
                vma.end - vma.start,
                libc::MADV_DONTNEED,
            )
        };
        if rc != 0 {
            walk.error = Some(io::Error::last_os_error());
            return 1;
        }
        walk.released.mappings += 1;
        walk.released.bytes += vma.rss_kb * 1024;
    }
    0
}

/// An entry of a dynamic section (`Elf64_Dyn`, or `Elf32_Dyn` on 32-bit
/// targets).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Dyn {
    tag: isize,
    val: usize,
}

const DT_NULL: isize = 0;
const DT_TEXTREL: isize = 22;
const DT_FLAGS: isize = 30;
const DF_TEXTREL: usize = 0x4;

/// Whether a dynamic section announces text relocations (`DT_TEXTREL`, or
/// `DF_TEXTREL` in `DT_FLAGS`): the loader then writes into the object's
/// read-only segments while relocating it, possibly while a walk runs, so
/// its pages are left alone.
fn text_relocations(dynamic: &[Dyn]) -> bool {
    dynamic
        .iter()
        .take_while(|d| d.tag != DT_NULL)
        .any(|d| d.tag == DT_TEXTREL || (d.tag == DT_FLAGS && d.val & DF_TEXTREL != 0))
}

/// A program header of a loaded object, at its run-time address.
#[derive(Debug, Clone, Copy)]
struct Segment {
    start: usize,
    len: usize,
    /// `PT_LOAD` without `PF_W`.
    read_only: bool,
    /// `PT_GNU_RELRO`.
    relro: bool,
}

/// One mapping of `/proc/self/smaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Vma {
    start: usize,
    end: usize,
    writable: bool,
    private: bool,
    /// A non-zero inode.
    file: bool,
    rss_kb: u64,
    anon_kb: u64,
    /// `VmFlags` has `lo` (mlocked), `io` or `pf` (no `MADV_DONTNEED`).
    pinned: bool,
}

/// The mappings of `vmas` that may be advised: clean, private, read-only,
/// file-backed and resident, lying inside a read-only segment of
/// `segments` (rounded out to pages) and touching no RELRO range.
fn eligible<'a>(
    vmas: &'a [Vma],
    segments: &'a [Segment],
    page: usize,
) -> impl Iterator<Item = &'a Vma> + 'a {
    let down = move |a: usize| a & !(page - 1);
    let up = move |a: usize| a.saturating_add(page - 1) & !(page - 1);
    vmas.iter().filter(move |v| {
        let clean = !v.writable && v.private && v.file && v.anon_kb == 0 && !v.pinned;
        let inside = segments
            .iter()
            .filter(|s| s.read_only)
            .any(|s| down(s.start) <= v.start && v.end <= up(s.start.saturating_add(s.len)));
        let relro = segments
            .iter()
            .filter(|s| s.relro)
            .any(|s| v.start < up(s.start.saturating_add(s.len)) && down(s.start) < v.end);
        clean && v.rss_kb > 0 && inside && !relro
    })
}

/// Parses `/proc/PID/smaps` (proc(5)) a line at a time (the whole text is
/// some 100 KiB, which the allocator would keep); mappings it cannot read
/// are left out.
fn parse_smaps(mut r: impl BufRead) -> io::Result<Vec<Vma>> {
    let mut out: Vec<Vma> = Vec::new();
    let mut current: Option<Vma> = None;
    let mut buf = String::new();
    loop {
        buf.clear();
        if r.read_line(&mut buf)? == 0 {
            break;
        }
        let line = buf.trim_end_matches('\n');
        if let Some(vma) = parse_header(line) {
            out.extend(current.replace(vma));
            continue;
        }
        let Some(v) = current.as_mut() else { continue };
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key {
            "Rss" => v.rss_kb = kb(value).unwrap_or(u64::MAX),
            "Anonymous" => v.anon_kb = kb(value).unwrap_or(u64::MAX),
            "VmFlags" => {
                v.pinned = value
                    .split_whitespace()
                    .any(|f| matches!(f, "lo" | "io" | "pf"));
            }
            _ => {}
        }
    }
    out.extend(current);
    Ok(out)
}

/// A mapping's first line: `start-end perms offset dev inode [path]`. Its
/// `Anonymous` starts unknown (`u64::MAX`), so a mapping whose lines are
/// missing is never eligible.
fn parse_header(line: &str) -> Option<Vma> {
    let mut f = line.split_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = f.next()?.as_bytes();
    let _offset = f.next()?;
    let _dev = f.next()?;
    let inode: u64 = f.next()?.parse().ok()?;
    if perms.len() != 4 || end <= start {
        return None;
    }
    Some(Vma {
        start,
        end,
        writable: perms[1] != b'-',
        private: perms[3] == b'p',
        file: inode != 0,
        rss_kb: 0,
        anon_kb: u64::MAX,
        pinned: true,
    })
}

/// `   123 kB` -> 123.
fn kb(value: &str) -> Option<u64> {
    value.trim().strip_suffix("kB")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55ca0de1c000-55ca0e095000 r--p 00000000 fe:00 9978255                    /usr/sbin/holdfastd
Size:               2532 kB
Rss:                1024 kB
Anonymous:             0 kB
VmFlags: rd mr mw me dw sd
55ca0e095000-55ca0e733000 r-xp 00278000 fe:00 9978255                    /usr/sbin/holdfastd
Size:               6776 kB
Rss:                5112 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw sd
55ca0e733000-55ca0e796000 r--p 00915000 fe:00 9978255                    /usr/sbin/holdfastd
Rss:                 396 kB
Anonymous:           388 kB
VmFlags: rd mr mw me dw ac sd
55ca0e796000-55ca0e79b000 rw-p 00977000 fe:00 9978255                    /usr/sbin/holdfastd
Rss:                  20 kB
Anonymous:            20 kB
VmFlags: rd wr mr mw me dw ac sd
7f0b7fe07000-7f0b7ff5d000 r-xp 00026000 fe:00 326269                     /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                 996 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me lo sd
20000000000-20040000000 rw-p 00000000 00:00 0
Rss:                 588 kB
Anonymous:           588 kB
VmFlags: rd wr mr mw me nr sd
7f0b80000000-7f0b80001000 r--p 00000000 00:00 0
Rss:                   4 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
7f0b80010000-7f0b80020000 r-xs 00000000 fe:00 77                         /dev/shm/x
Rss:                   8 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me sd
";

    fn segment(start: usize, len: usize, read_only: bool, relro: bool) -> Segment {
        Segment {
            start,
            len,
            read_only,
            relro,
        }
    }

    #[test]
    fn parses_smaps() {
        let v = parse_smaps(SMAPS.as_bytes()).expect("parse");
        assert_eq!(v.len(), 8);
        assert_eq!(
            v[1],
            Vma {
                start: 0x55ca0e095000,
                end: 0x55ca0e733000,
                writable: false,
                private: true,
                file: true,
                rss_kb: 5112,
                anon_kb: 0,
                pinned: false,
            }
        );
        assert!(v[3].writable);
        assert!(v[4].pinned, "mlocked");
        assert!(!v[5].file);
        assert!(!v[7].private);
    }

    #[test]
    fn only_clean_read_only_file_pages_of_read_only_segments() {
        let vmas = parse_smaps(SMAPS.as_bytes()).expect("parse");
        // The executable: rodata and text read-only (not page-aligned ends),
        // RELRO inside the writable segment. libc's text is mlocked here.
        let segments = [
            segment(0x55ca0de1c000, 0x279000 - 0x10, true, false),
            segment(0x55ca0e095000 + 0x40, 0x69e000 - 0x40, true, false),
            segment(0x55ca0e733000, 0x68000, false, false),
            segment(0x55ca0e733000, 0x63000, false, true),
            segment(0x7f0b7fe07000, 0x156000, true, false),
            segment(0x7f0b80000000, 0x1000, true, false),
            segment(0x7f0b80010000, 0x10000, true, false),
        ];
        let starts: Vec<usize> = eligible(&vmas, &segments, 4096).map(|v| v.start).collect();
        assert_eq!(starts, [0x55ca0de1c000, 0x55ca0e095000]);
    }

    #[test]
    fn nothing_outside_a_read_only_segment_or_touching_relro() {
        let vmas = parse_smaps(SMAPS.as_bytes()).expect("parse");
        // Text as a segment that is too short, rodata overlapped by RELRO.
        let segments = [
            segment(0x55ca0de1c000, 0x279000, true, false),
            segment(0x55ca0e094000, 0x1000, false, true),
            segment(0x55ca0e095000, 0x1000, true, false),
        ];
        assert_eq!(eligible(&vmas, &segments, 4096).count(), 0);
    }

    #[test]
    fn a_mapping_with_missing_lines_is_not_eligible() {
        let vmas = parse_smaps("1000-2000 r-xp 00000000 fe:00 5 /bin/x\nRss: 4 kB\n".as_bytes())
            .expect("parse");
        let segments = [segment(0x1000, 0x1000, true, false)];
        assert_eq!(eligible(&vmas, &segments, 4096).count(), 0);
    }

    #[test]
    fn text_relocations_are_seen_up_to_dt_null() {
        let d = |tag, val| Dyn { tag, val };
        assert!(!text_relocations(&[
            d(1, 5),
            d(DT_FLAGS, 0x8),
            d(DT_NULL, 0)
        ]));
        assert!(text_relocations(&[
            d(1, 5),
            d(DT_TEXTREL, 0),
            d(DT_NULL, 0)
        ]));
        assert!(text_relocations(&[d(DT_FLAGS, 0x8 | DF_TEXTREL)]));
        assert!(!text_relocations(&[d(DT_NULL, 0), d(DT_TEXTREL, 0)]));
    }

    /// Checksum of a table in the executable's read-only data.
    fn checksum() -> u64 {
        static TABLE: [u64; 4096] = {
            let mut t = [0u64; 4096];
            let mut i = 0;
            while i < t.len() {
                t[i] = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                i += 1;
            }
            t
        };
        std::hint::black_box(&TABLE)
            .iter()
            .fold(0u64, |a, x| a.rotate_left(5) ^ x)
    }

    fn exe_rss_kb() -> u64 {
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let text = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut total = 0;
        let mut ours = false;
        for line in text.lines() {
            if parse_header(line).is_some() {
                ours = line.ends_with(&*exe.to_string_lossy());
            } else if let (true, Some(v)) = (ours, line.strip_prefix("Rss:")) {
                total += kb(v).expect("Rss");
            }
        }
        total
    }

    #[test]
    fn releases_the_executables_pages_and_reads_back_the_same() {
        let before = checksum();
        let rss_before = exe_rss_kb();
        let r = release_clean_code().expect("release");
        assert!(r.mappings >= 2, "{r:?}");
        assert!(r.bytes > 0, "{r:?}");
        assert_eq!(checksum(), before);
        // Tests on other threads fault code pages back in meanwhile: a
        // drop in any of a few tries proves the release works.
        let dropped = (0..5).any(|_| {
            let r = release_clean_code().expect("release again");
            assert!(r.mappings >= 1, "{r:?}");
            exe_rss_kb() < rss_before
        });
        assert!(dropped, "the executable's resident pages never went down");
    }
}
