//! Extism memory: the byte store the `extism:host/env` functions read and write.
//!
//! The bytes live in the linear memory of the instance's kernel (see
//! `kernel.wat`), so the PDKs' per-8-byte `load_u64`/`store_u64`/`input_load_u64`
//! calls are wasm-to-wasm calls. This module is the host's half: the block
//! bookkeeping (offsets handed to the guest are positions in the kernel's
//! memory; 0 means "null", so the first block starts at [`BASE`]) and the
//! header it keeps in the kernel's first bytes so the kernel can check
//! bounds. Functions that touch bytes take the kernel memory's slice.
//!
//! The edge semantics are the reference kernel's (`extism` 1.30.0's
//! `extism-runtime.wasm`, whose source is the extism repository's
//! `kernel/src/lib.rs`), wherever they are safe for the host:
//!
//! - `alloc(0)` is 0, the null handle; 0 is never a block.
//! - Allocation bumps while the kernel's memory has room; freed blocks are
//!   reused (first fit by address, the tail split off when the block is at
//!   least 128 bytes larger than asked) only when the memory would otherwise
//!   have to grow. So a freed handle stays invalid (`length` 0) until memory
//!   runs short, and blocks are never merged.
//! - A block a guest allocates reads as zeros unless it is a reused freed
//!   block (which keeps its bytes, as in the kernel): the bytes a call used
//!   are zeroed before they are handed out again, in the next call or after
//!   `reset` (the kernel zeroes them in `reset`).
//! - `free` of anything that is not a live block does nothing; freeing the
//!   input's block makes the input empty.
//! - The data region is every byte of the kernel's memory from [`BASE`] on,
//!   allocated or not: loads outside it return 0 and stores are ignored
//!   (the kernel's checks, `kernel.wat`); `input_set`, `output_set` and
//!   `error_set` only check that their range lies in it, and ignore a call
//!   whose range does not (the guest may name freed blocks, interior
//!   pointers or ranges longer than a block, as with the kernel).
//!
//! What differs, on purpose: the block bookkeeping lives on the host, so the
//! guest can corrupt its own Extism data but never the allocator's state,
//! and the header (the bytes below [`BASE`]) is out of the guest's reach.
//! Every range is checked without wrapping: the kernel's `p + len - 1`
//! arithmetic wraps, which would let a huge length through; here such a
//! call is ignored.

use std::collections::BTreeMap;
use std::ops::Range;

use rustc_hash::FxHashMap;

/// First usable offset, so that 0 is never a valid handle. The bytes before
/// it hold the header the kernel reads.
pub const BASE: u64 = 64;
const HEADER_END: usize = 8;
const HEADER_INPUT_OFFSET: usize = 16;
const HEADER_INPUT_LENGTH: usize = 24;
/// A reused free block at least this much larger than the request is split,
/// as in the kernel (`find_free_block`).
const SPLIT_EXCESS: u64 = 128;

#[derive(Clone, Copy, Debug)]
struct Block {
    capacity: u64,
    len: u64,
}

/// One instance's Extism memory bookkeeping.
#[derive(Debug)]
pub struct ExtismMemory {
    /// The bump position: end of the last block bumped since the last reset.
    used: u64,
    /// Bytes of the kernel's memory (the data region ends there).
    capacity: u64,
    blocks: FxHashMap<u64, Block>,
    /// Freed blocks by offset (their capacity), for first-fit reuse.
    free: BTreeMap<u64, u64>,
    limit: u64,
    /// Bytes in `[used, stale_end)` may still hold an earlier call's data and
    /// are zeroed before a guest's allocation hands them out.
    stale_end: u64,
    input: (u64, u64),
    output: (u64, u64),
    error: u64,
}

/// A new block, and which of its bytes still hold older data (to be zeroed
/// when the block is the guest's; the host overwrites its own blocks).
#[derive(Debug, PartialEq, Eq)]
pub struct Allocation {
    pub offset: u64,
    pub stale: Range<u64>,
}

impl ExtismMemory {
    /// `limit` caps the bytes this memory may hold (allocations past it return 0).
    pub fn new(limit: u64) -> ExtismMemory {
        ExtismMemory {
            used: BASE,
            capacity: 0,
            blocks: FxHashMap::default(),
            free: BTreeMap::new(),
            limit,
            stale_end: BASE,
            input: (0, 0),
            output: (0, 0),
            error: 0,
        }
    }

    /// Forgets every block, the input, the output and the error: start of a
    /// call. The bytes the blocks held are zeroed lazily, when an allocation
    /// of the guest's hands them out again.
    pub fn reset(&mut self) {
        self.stale_end = self.stale_end.max(self.used);
        self.used = BASE;
        self.blocks.clear();
        self.free.clear();
        self.input = (0, 0);
        self.output = (0, 0);
        self.error = 0;
    }

    /// The guest's `reset`: like [`ExtismMemory::reset`], but the bytes to
    /// zero now are returned, since handles from before it may still be
    /// read (the kernel zeroes what was allocated).
    pub fn reset_wiping(&mut self) -> Range<usize> {
        let end = self.stale_end.max(self.used).min(self.capacity);
        self.reset();
        self.stale_end = BASE;
        BASE as usize..(end.max(BASE)) as usize
    }

    /// End of the last block bumped: the kernel's memory must hold this many bytes.
    pub fn size(&self) -> u64 {
        self.used
    }

    /// Bytes of the kernel's memory, as the host last told.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The kernel's memory now holds `bytes` bytes (it only grows).
    pub fn set_capacity(&mut self, bytes: u64) {
        self.capacity = bytes;
    }

    /// What `memory_bytes` reports: the allocator's capacity, the data region's
    /// size (the kernel reports its `length`, which grows with its memory).
    pub fn memory_bytes(&self) -> u64 {
        self.capacity.saturating_sub(BASE)
    }

    /// Most bytes this memory may hold.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Writes what the kernel checks against (end of the data region, the
    /// input's place) into the first bytes of its memory. Call after every change.
    pub fn write_header(&self, bytes: &mut [u8]) {
        let mut put = |at: usize, value: u64| {
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        };
        put(HEADER_END, self.capacity);
        put(HEADER_INPUT_OFFSET, self.input.0);
        put(HEADER_INPUT_LENGTH, self.input.1);
    }

    /// Allocates `n` bytes; `None` when `n` is 0 or nothing fits within the
    /// limit. The block may end past [`ExtismMemory::capacity`]: the caller
    /// grows the kernel's memory to [`ExtismMemory::size`], or gives the
    /// block back with [`ExtismMemory::cancel`].
    pub fn alloc(&mut self, n: u64) -> Option<Allocation> {
        if n == 0 {
            return None;
        }
        let end = self.used.checked_add(n)?;
        if end > self.capacity.min(self.limit) {
            if let Some(offset) = self.reuse(n) {
                return Some(Allocation {
                    offset,
                    stale: offset..offset,
                });
            }
            if end > self.limit {
                return None;
            }
        }
        let offset = self.used;
        self.used = end;
        self.blocks.insert(
            offset,
            Block {
                capacity: n,
                len: n,
            },
        );
        let stale_end = end.min(self.stale_end.max(offset));
        Some(Allocation {
            offset,
            stale: offset..stale_end,
        })
    }

    /// First fit among the freed blocks (by address), as the kernel does when
    /// its memory is full: a block much larger than asked gives up its tail.
    fn reuse(&mut self, n: u64) -> Option<u64> {
        let (&offset, &capacity) = self.free.iter().find(|(_, &cap)| cap >= n)?;
        if capacity - n >= SPLIT_EXCESS {
            let rest = capacity - n;
            self.free.insert(offset, rest);
            let tail = offset + rest;
            self.blocks.insert(
                tail,
                Block {
                    capacity: n,
                    len: n,
                },
            );
            Some(tail)
        } else {
            self.free.remove(&offset);
            self.blocks.insert(offset, Block { capacity, len: n });
            Some(offset)
        }
    }

    /// Takes back the block just bumped at `offset` (its memory could not grow).
    pub fn cancel(&mut self, offset: u64) {
        if let Some(block) = self.blocks.remove(&offset) {
            debug_assert_eq!(offset + block.capacity, self.used);
            self.used = offset;
        }
    }

    /// Frees the block at `offset`; anything else is ignored, as in the kernel.
    pub fn free(&mut self, offset: u64) {
        let Some(block) = self.blocks.remove(&offset) else {
            return;
        };
        if offset == self.input.0 {
            self.input.1 = 0;
        }
        self.free.insert(offset, block.capacity);
    }

    /// Length of the block at `offset`, or 0 if no live block starts there.
    pub fn length(&self, offset: u64) -> u64 {
        self.blocks.get(&offset).map_or(0, |b| b.len)
    }

    /// The bytes of the live block at `offset`, if one starts there.
    pub fn block<'b>(&self, bytes: &'b [u8], offset: u64) -> Option<&'b [u8]> {
        let block = self.blocks.get(&offset)?;
        bytes.get(offset as usize..(offset + block.len) as usize)
    }

    /// The bytes a guest passes by handle to a host function: 0 is the null
    /// handle (no bytes), as the reference host reads it; otherwise a live
    /// block. `None` for anything else (a freed block, an interior pointer).
    pub fn handle<'b>(&self, bytes: &'b [u8], offset: u64) -> Option<&'b [u8]> {
        if offset == 0 {
            return Some(&[]);
        }
        self.block(bytes, offset)
    }

    /// Whether `[offset, offset + len)` lies in the data region (a range of
    /// length 0 must start in it). No arithmetic wraps.
    pub fn in_range(&self, offset: u64, len: u64) -> bool {
        offset >= BASE
            && offset < self.capacity
            && offset
                .checked_add(len)
                .is_some_and(|end| end <= self.capacity)
    }

    /// Marks a range as the input (the kernel's `input_set`); a range outside
    /// the data region is ignored. Returns whether it was taken.
    pub fn mark_input(&mut self, offset: u64, len: u64) -> bool {
        let ok = self.in_range(offset, len);
        if ok {
            self.input = (offset, len);
        }
        ok
    }

    pub fn input_offset(&self) -> u64 {
        self.input.0
    }

    pub fn input_length(&self) -> u64 {
        self.input.1
    }

    /// Records the output range (the kernel's `output_set`); a range outside
    /// the data region is ignored and the output stays as it was.
    pub fn set_output(&mut self, offset: u64, len: u64) {
        if self.in_range(offset, len) {
            self.output = (offset, len);
        }
    }

    pub fn output_offset(&self) -> u64 {
        self.output.0
    }

    pub fn output_length(&self) -> u64 {
        self.output.1
    }

    /// The output bytes the guest set (empty if none).
    pub fn output<'b>(&self, bytes: &'b [u8]) -> &'b [u8] {
        let (offset, len) = self.output;
        bytes
            .get(offset as usize..(offset + len) as usize)
            .unwrap_or_default()
    }

    /// Sets the error handle (the kernel's `error_set`): 0 clears it, an
    /// offset outside the data region is ignored, anything else is kept; it
    /// counts as an error only if it names a non-empty live block when the
    /// call ends.
    pub fn set_error(&mut self, offset: u64) {
        if offset == 0 || (offset >= BASE && offset < self.capacity) {
            self.error = offset;
        }
    }

    pub fn error_offset(&self) -> u64 {
        self.error
    }

    /// The error message the guest set, if it names a non-empty block.
    pub fn error<'b>(&self, bytes: &'b [u8]) -> Option<&'b [u8]> {
        self.block(bytes, self.error).filter(|b| !b.is_empty())
    }
}

/// The input does not fit in the plugin's memory limit.
#[derive(Debug, thiserror::Error)]
#[error("input of {len} bytes does not fit in the plugin's Extism memory limit of {limit} bytes")]
pub struct InputTooLarge {
    pub len: u64,
    pub limit: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 65536;

    /// Bookkeeping plus a byte buffer standing in for the kernel's memory.
    fn with_bytes(limit: u64) -> (ExtismMemory, Vec<u8>) {
        let mut m = ExtismMemory::new(limit);
        m.set_capacity(PAGE);
        (m, vec![0; PAGE as usize])
    }

    fn alloc(m: &mut ExtismMemory, n: u64) -> u64 {
        m.alloc(n).map_or(0, |a| a.offset)
    }

    #[test]
    fn blocks_have_lengths_only_at_their_start() {
        let (mut m, _) = with_bytes(1 << 20);
        let h = alloc(&mut m, 16);
        assert!(h >= BASE);
        assert_eq!(m.length(h), 16);
        assert_eq!(m.length(h + 1), 0, "length only answers for block starts");
        assert_eq!(m.length(0), 0);
        assert_eq!(m.size(), h + 16);
    }

    #[test]
    fn zero_and_over_limit_allocations_return_null() {
        let mut m = ExtismMemory::new(1024);
        m.set_capacity(PAGE);
        assert_eq!(m.alloc(0), None);
        assert_eq!(m.alloc(4096), None);
        assert_eq!(m.alloc(u64::MAX), None);
        assert_ne!(alloc(&mut m, 100), 0);
        assert_eq!(m.alloc(1024), None, "the limit counts, not the page");
    }

    #[test]
    fn the_null_handle_reads_as_empty_and_others_must_be_live() {
        let (mut m, bytes) = with_bytes(1 << 20);
        assert_eq!(m.handle(&bytes, 0), Some(&[][..]));
        assert_eq!(m.block(&bytes, 0), None, "0 is never a block");
        let h = alloc(&mut m, 4);
        assert_eq!(m.handle(&bytes, h).map(<[u8]>::len), Some(4));
        assert_eq!(m.handle(&bytes, h + 1), None);
        m.free(h);
        assert_eq!(m.handle(&bytes, h), None, "a freed handle is no handle");
        assert_eq!(m.handle(&bytes, 987654321), None);
    }

    #[test]
    fn hostile_offsets_are_ignored_not_panics() {
        let (mut m, bytes) = with_bytes(1 << 20);
        let h = alloc(&mut m, 8);
        m.set_output(h, 8);
        for (offset, len) in [
            (u64::MAX, 16),
            (u64::MAX - 3, 8),
            (1 << 40, 1 << 40),
            (h, u64::MAX),
            (h + 1, u64::MAX - h),
            (0, 0),
            (0, 1),
            (63, 2),
            (PAGE - 4, 8),
            (PAGE, 0),
        ] {
            assert!(!m.in_range(offset, len), "{offset} +{len}");
            m.set_output(offset, len);
            assert_eq!(m.output_offset(), h, "{offset} +{len} was ignored");
            assert!(!m.mark_input(offset, len));
        }
        assert_eq!(m.output(&bytes).len(), 8);
        m.free(987654321);
        m.free(0);
        assert!(m.block(&bytes, 987654321).is_none());
        // Past the block but inside the region: allowed, as in the kernel.
        assert!(m.in_range(h, 100));
        assert!(m.in_range(PAGE - 8, 8));
        assert!(m.in_range(h + 3, 0));
    }

    #[test]
    fn bump_while_there_is_room_then_reuse_first_fit() {
        let (mut m, _) = with_bytes(1 << 20);
        let a = alloc(&mut m, 1000);
        let b = alloc(&mut m, 1000);
        m.free(a);
        let c = alloc(&mut m, 1000);
        assert!(c > b, "no reuse while the memory has room: {c}");
        assert_eq!(m.length(a), 0, "the freed handle stays invalid");
        // Fill the page: now the freed block is reused, whole (excess < 128).
        let rest = PAGE - m.size();
        let d = alloc(&mut m, rest);
        assert_eq!(m.size(), PAGE, "{d}");
        let e = alloc(&mut m, 900);
        assert_eq!(e, a, "first fit reuses the whole freed block");
        assert_eq!(m.length(e), 900);
        // A larger free block gives up its tail.
        m.free(b);
        let f = alloc(&mut m, 150);
        assert_eq!(f, b + 1000 - 150, "the tail of the freed block");
        assert_eq!(m.length(b), 0);
        let g = alloc(&mut m, 190);
        assert_eq!(g, b + 1000 - 150 - 190);
        // Nothing free fits: the block goes past the page (the kernel grows).
        let h = alloc(&mut m, 2000);
        assert_eq!(h, PAGE);
        assert_eq!(m.size(), PAGE + 2000);
        m.cancel(h);
        assert_eq!(m.size(), PAGE);
        assert_eq!(m.length(h), 0);
    }

    #[test]
    fn only_reused_bytes_of_earlier_calls_are_stale() {
        let (mut m, _) = with_bytes(1 << 20);
        let a = m.alloc(100).unwrap();
        assert!(a.stale.is_empty(), "fresh memory is zero");
        m.reset();
        let b = m.alloc(40).unwrap();
        assert_eq!(b.stale, BASE..BASE + 40, "last call's bytes");
        let c = m.alloc(100).unwrap();
        assert_eq!(
            c.stale,
            BASE + 40..BASE + 100,
            "up to where the last call ended"
        );
        let d = m.alloc(10).unwrap();
        assert!(d.stale.is_empty());
        m.reset();
        let e = m.alloc(500).unwrap();
        assert_eq!(e.stale, BASE..BASE + 150);
        assert_eq!(m.reset_wiping(), BASE as usize..(BASE + 500) as usize);
        assert!(m.alloc(500).unwrap().stale.is_empty(), "wiped already");
    }

    #[test]
    fn header_tells_the_kernel_the_bounds() {
        let (mut m, mut bytes) = with_bytes(1 << 20);
        let h = alloc(&mut m, 11);
        bytes[h as usize..h as usize + 11].copy_from_slice(b"hello world");
        assert!(m.mark_input(h, 11));
        m.write_header(&mut bytes);
        let word =
            |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(word(&bytes, HEADER_END), PAGE);
        assert_eq!(word(&bytes, HEADER_INPUT_OFFSET), h);
        assert_eq!(word(&bytes, HEADER_INPUT_LENGTH), 11);
        m.free(h);
        m.write_header(&mut bytes);
        assert_eq!(
            word(&bytes, HEADER_INPUT_LENGTH),
            0,
            "a freed input is empty"
        );
    }

    #[test]
    fn output_and_reset() {
        let (mut m, mut bytes) = with_bytes(1 << 20);
        let out = alloc(&mut m, 6);
        bytes[out as usize..out as usize + 6].copy_from_slice(b"result");
        m.set_output(out, 6);
        assert_eq!(m.output(&bytes), b"result");
        m.free(out);
        assert_eq!(m.output(&bytes), b"result", "a freed block's bytes stay");
        m.reset();
        assert_eq!(m.output(&bytes), b"");
        assert_eq!(m.input_length(), 0);
        assert_eq!(m.size(), BASE);
        assert_eq!(m.memory_bytes(), PAGE - BASE);
    }

    #[test]
    fn error_must_name_a_block() {
        let (mut m, mut bytes) = with_bytes(1 << 20);
        let e = alloc(&mut m, 4);
        bytes[e as usize..e as usize + 4].copy_from_slice(b"boom");
        m.set_error(e);
        assert_eq!(m.error(&bytes), Some(&b"boom"[..]));
        m.set_error(1 << 40);
        assert_eq!(m.error_offset(), e, "out of the region: ignored");
        m.set_error(e + 1);
        assert!(m.error(&bytes).is_none(), "kept, but not a block");
        m.set_error(0);
        assert_eq!(m.error_offset(), 0);
    }
}
