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
//! Allocation follows the reference kernel's shape: bump allocation, freed
//! blocks reused when large enough, everything dropped at the start of each
//! call. Every access is bounds-checked; a bad offset is an error for the
//! guest's call, never a read outside the memory.

use rustc_hash::FxHashMap;

/// First usable offset, so that 0 is never a valid handle. The bytes before
/// it hold the header the kernel reads.
pub const BASE: u64 = 64;
const HEADER_USED: usize = 8;
const HEADER_INPUT_OFFSET: usize = 16;
const HEADER_INPUT_LENGTH: usize = 24;

#[derive(Clone, Copy, Debug)]
struct Block {
    capacity: u64,
    len: u64,
}

/// One instance's Extism memory bookkeeping.
#[derive(Debug)]
pub struct ExtismMemory {
    /// End of the last block: bytes in use.
    used: u64,
    blocks: FxHashMap<u64, Block>,
    free: Vec<(u64, u64)>,
    limit: u64,
    input: (u64, u64),
    output: (u64, u64),
    error: u64,
}

/// An out-of-bounds access by the guest.
#[derive(Debug, thiserror::Error)]
#[error(
    "{operation}: offset {offset} (+{width} bytes) is outside Extism memory ({size} bytes in use)"
)]
pub struct OutOfBounds {
    pub operation: &'static str,
    pub offset: u64,
    pub width: u64,
    pub size: u64,
}

impl ExtismMemory {
    /// `limit` caps the bytes this memory may hold (allocations past it return 0).
    pub fn new(limit: u64) -> ExtismMemory {
        ExtismMemory {
            used: BASE,
            blocks: FxHashMap::default(),
            free: Vec::new(),
            limit,
            input: (0, 0),
            output: (0, 0),
            error: 0,
        }
    }

    /// Forgets every block, the input, the output and the error: start of a call.
    pub fn reset(&mut self) {
        self.used = BASE;
        self.blocks.clear();
        self.free.clear();
        self.input = (0, 0);
        self.output = (0, 0);
        self.error = 0;
    }

    /// Bytes in use (the high-water mark of the bump allocator).
    pub fn size(&self) -> u64 {
        self.used
    }

    /// Most bytes this memory may hold.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Writes what the kernel checks against (bytes in use, the input's place)
    /// into the first bytes of its memory. Call after every change.
    pub fn write_header(&self, bytes: &mut [u8]) {
        let mut put = |at: usize, value: u64| {
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        };
        put(HEADER_USED, self.used);
        put(HEADER_INPUT_OFFSET, self.input.0);
        put(HEADER_INPUT_LENGTH, self.input.1);
    }

    /// Allocates `n` bytes; 0 when `n` is 0 or the limit would be exceeded.
    /// The caller makes sure the kernel's memory holds [`ExtismMemory::size`] bytes.
    pub fn alloc(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        if let Some(i) = self.free.iter().position(|&(_, cap)| cap >= n) {
            let (offset, capacity) = self.free.swap_remove(i);
            self.blocks.insert(offset, Block { capacity, len: n });
            return offset;
        }
        let offset = self.used;
        match offset.checked_add(n) {
            Some(end) if end <= self.limit => self.used = end,
            _ => return 0,
        }
        self.blocks.insert(
            offset,
            Block {
                capacity: n,
                len: n,
            },
        );
        offset
    }

    /// Frees the block at `offset`; unknown offsets are ignored, as in the kernel.
    pub fn free(&mut self, offset: u64) {
        let Some(block) = self.blocks.remove(&offset) else {
            return;
        };
        if offset == self.input.0 {
            self.input.1 = 0;
        }
        if offset + block.capacity == self.used {
            self.used = offset;
        } else {
            self.free.push((offset, block.capacity));
        }
    }

    /// Length of the block at `offset`, or 0 if no block starts there.
    pub fn length(&self, offset: u64) -> u64 {
        self.blocks.get(&offset).map_or(0, |b| b.len)
    }

    /// The bytes of the block at `offset`, if one starts there.
    pub fn block<'b>(&self, bytes: &'b [u8], offset: u64) -> Option<&'b [u8]> {
        let block = self.blocks.get(&offset)?;
        bytes.get(offset as usize..(offset + block.len) as usize)
    }

    /// Bytes `[offset, offset + len)`, bounds-checked.
    pub fn slice<'b>(
        &self,
        bytes: &'b [u8],
        operation: &'static str,
        offset: u64,
        len: u64,
    ) -> Result<&'b [u8], OutOfBounds> {
        let range = self.range(operation, offset, len)?;
        bytes.get(range).ok_or(OutOfBounds {
            operation,
            offset,
            width: len,
            size: bytes.len() as u64,
        })
    }

    fn range(
        &self,
        operation: &'static str,
        offset: u64,
        width: u64,
    ) -> Result<std::ops::Range<usize>, OutOfBounds> {
        match offset.checked_add(width) {
            Some(end) if offset >= BASE && end <= self.used => Ok(offset as usize..end as usize),
            _ => Err(OutOfBounds {
                operation,
                offset,
                width,
                size: self.used,
            }),
        }
    }

    /// Marks a block (given by the guest) as the input, like the kernel's `input_set`.
    pub fn mark_input(&mut self, offset: u64, len: u64) -> Result<(), OutOfBounds> {
        if len > 0 {
            self.range("input_set", offset, len)?;
        }
        self.input = (offset, len);
        Ok(())
    }

    pub fn input_offset(&self) -> u64 {
        self.input.0
    }

    pub fn input_length(&self) -> u64 {
        self.input.1
    }

    /// Records the output range; checked now so a bogus range fails the call
    /// where it happened.
    pub fn set_output(&mut self, offset: u64, len: u64) -> Result<(), OutOfBounds> {
        if len > 0 {
            self.range("output_set", offset, len)?;
        }
        self.output = (offset, len);
        Ok(())
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
        self.slice(bytes, "output", offset, len).unwrap_or_default()
    }

    /// Sets the error handle (0 clears it). The message is the block's content;
    /// an offset that is not a block counts as no error, as in the kernel.
    pub fn set_error(&mut self, offset: u64) {
        self.error = offset;
    }

    pub fn error_offset(&self) -> u64 {
        self.error
    }

    /// The error message the guest set, if it names a non-empty block.
    pub fn error<'b>(&self, bytes: &'b [u8]) -> Option<&'b [u8]> {
        self.block(bytes, self.error).filter(|b| !b.is_empty())
    }

    /// Describes an access the kernel refused (`code` as in `kernel.wat`).
    pub fn out_of_bounds(&self, code: i32, offset: u64, width: u64) -> OutOfBounds {
        let (operation, size) = match code {
            0 => ("load_u8", self.used),
            1 => ("load_u64", self.used),
            2 => ("store_u8", self.used),
            3 => ("store_u64", self.used),
            4 => ("input_load_u8", self.input.1),
            _ => ("input_load_u64", self.input.1),
        };
        OutOfBounds {
            operation,
            offset,
            width,
            size,
        }
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

    /// Bookkeeping plus a byte buffer standing in for the kernel's memory.
    fn with_bytes(limit: u64) -> (ExtismMemory, Vec<u8>) {
        (ExtismMemory::new(limit), vec![0; 1 << 16])
    }

    #[test]
    fn blocks_have_lengths_only_at_their_start() {
        let (mut m, _) = with_bytes(1 << 20);
        let h = m.alloc(16);
        assert!(h >= BASE);
        assert_eq!(m.length(h), 16);
        assert_eq!(m.length(h + 1), 0, "length only answers for block starts");
        assert_eq!(m.size(), h + 16);
    }

    #[test]
    fn zero_and_over_limit_allocations_return_null() {
        let mut m = ExtismMemory::new(1024);
        assert_eq!(m.alloc(0), 0);
        assert_eq!(m.alloc(4096), 0);
        assert_eq!(m.alloc(u64::MAX), 0);
        assert_ne!(m.alloc(100), 0);
    }

    #[test]
    fn hostile_offsets_are_errors_not_panics() {
        let (mut m, bytes) = with_bytes(1 << 20);
        let h = m.alloc(8);
        assert!(m.slice(&bytes, "x", u64::MAX - 3, 8).is_err());
        assert!(m.slice(&bytes, "x", h + 1, 8).is_err(), "straddles the end");
        assert!(m.slice(&bytes, "x", 0, 1).is_err(), "null and the header");
        assert!(m.set_output(u64::MAX, 16).is_err());
        assert!(m.set_output(1 << 40, 1 << 40).is_err());
        assert!(m.mark_input(h, 1 << 40).is_err());
        m.free(987654321);
        m.free(0);
        assert!(m.block(&bytes, 987654321).is_none());
        let err = m.out_of_bounds(1, 1 << 40, 8);
        assert_eq!(
            err.to_string(),
            format!("load_u64: offset 1099511627776 (+8 bytes) is outside Extism memory ({} bytes in use)", m.size())
        );
    }

    #[test]
    fn freed_blocks_are_reused_and_tail_frees_shrink() {
        let mut m = ExtismMemory::new(1 << 20);
        let a = m.alloc(100);
        let b = m.alloc(100);
        m.free(a);
        let c = m.alloc(50);
        assert_eq!(c, a, "first fit reuses the freed block");
        assert_eq!(m.length(c), 50);
        let size = m.size();
        m.free(b);
        assert!(
            m.size() < size,
            "freeing the last block gives its bytes back"
        );
    }

    #[test]
    fn header_tells_the_kernel_the_bounds() {
        let (mut m, mut bytes) = with_bytes(1 << 20);
        let h = m.alloc(11);
        bytes[h as usize..h as usize + 11].copy_from_slice(b"hello world");
        m.mark_input(h, 11).unwrap();
        m.write_header(&mut bytes);
        let word =
            |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(word(&bytes, HEADER_USED), h + 11);
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
        let out = m.alloc(6);
        bytes[out as usize..out as usize + 6].copy_from_slice(b"result");
        m.set_output(out, 6).unwrap();
        assert_eq!(m.output(&bytes), b"result");
        m.reset();
        assert_eq!(m.output(&bytes), b"");
        assert_eq!(m.input_length(), 0);
        assert_eq!(m.size(), BASE);
    }

    #[test]
    fn error_must_name_a_block() {
        let (mut m, mut bytes) = with_bytes(1 << 20);
        m.set_error(1 << 40);
        assert!(m.error(&bytes).is_none());
        let e = m.alloc(4);
        bytes[e as usize..e as usize + 4].copy_from_slice(b"boom");
        m.set_error(e);
        assert_eq!(m.error(&bytes), Some(&b"boom"[..]));
    }
}
