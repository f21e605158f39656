//! Extism memory: the byte store the `extism:host/env` functions read and write.
//!
//! The reference runtime keeps it in a second wasm instance (its "kernel");
//! wasmgate keeps it on the host, in one growable buffer per instance, which
//! saves a wasm-to-wasm hop on every `load_u64`/`store_u64` the PDKs make for
//! each 8 bytes of input and output. Offsets handed to the guest are positions
//! in that buffer; 0 means "null", so the first block starts at [`BASE`].
//!
//! Allocation follows the kernel's shape: bump allocation, freed blocks reused
//! when large enough, everything dropped at the start of each call. Every
//! access is bounds-checked; a bad offset is an error for the guest's call,
//! never a read outside the buffer.

use rustc_hash::FxHashMap;

/// First usable offset, so that 0 is never a valid handle.
pub const BASE: u64 = 64;

#[derive(Clone, Copy, Debug)]
struct Block {
    capacity: u64,
    len: u64,
}

/// One instance's Extism memory.
#[derive(Debug)]
pub struct ExtismMemory {
    bytes: Vec<u8>,
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
            bytes: vec![0; BASE as usize],
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
        self.bytes.truncate(BASE as usize);
        self.blocks.clear();
        self.free.clear();
        self.input = (0, 0);
        self.output = (0, 0);
        self.error = 0;
    }

    /// Bytes in use (the high-water mark of the bump allocator).
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Allocates `n` bytes; 0 when `n` is 0 or the limit would be exceeded.
    pub fn alloc(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        if let Some(i) = self.free.iter().position(|&(_, cap)| cap >= n) {
            let (offset, capacity) = self.free.swap_remove(i);
            self.blocks.insert(offset, Block { capacity, len: n });
            return offset;
        }
        let offset = self.bytes.len() as u64;
        let end = match offset.checked_add(n) {
            Some(end) if end <= self.limit => end,
            _ => return 0,
        };
        self.bytes.resize(end as usize, 0);
        self.blocks.insert(
            offset,
            Block {
                capacity: n,
                len: n,
            },
        );
        offset
    }

    /// Allocates a block holding `data`; 0 if it does not fit.
    pub fn alloc_bytes(&mut self, data: &[u8]) -> u64 {
        let offset = self.alloc(data.len() as u64);
        if offset != 0 {
            self.bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        }
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
        if offset + block.capacity == self.bytes.len() as u64 {
            self.bytes.truncate(offset as usize);
        } else {
            self.free.push((offset, block.capacity));
        }
    }

    /// Length of the block at `offset`, or 0 if no block starts there.
    pub fn length(&self, offset: u64) -> u64 {
        self.blocks.get(&offset).map_or(0, |b| b.len)
    }

    /// The bytes of the block at `offset`, if one starts there.
    pub fn block(&self, offset: u64) -> Option<&[u8]> {
        let block = self.blocks.get(&offset)?;
        Some(&self.bytes[offset as usize..(offset + block.len) as usize])
    }

    /// Bytes `[offset, offset + len)`, bounds-checked.
    pub fn slice(
        &self,
        operation: &'static str,
        offset: u64,
        len: u64,
    ) -> Result<&[u8], OutOfBounds> {
        let range = self.range(operation, offset, len)?;
        Ok(&self.bytes[range])
    }

    fn range(
        &self,
        operation: &'static str,
        offset: u64,
        width: u64,
    ) -> Result<std::ops::Range<usize>, OutOfBounds> {
        match offset.checked_add(width) {
            Some(end) if offset >= BASE && end <= self.bytes.len() as u64 => {
                Ok(offset as usize..end as usize)
            }
            _ => Err(OutOfBounds {
                operation,
                offset,
                width,
                size: self.bytes.len() as u64,
            }),
        }
    }

    pub fn load_u8(&self, offset: u64) -> Result<u8, OutOfBounds> {
        let r = self.range("load_u8", offset, 1)?;
        Ok(self.bytes[r.start])
    }

    pub fn load_u64(&self, offset: u64) -> Result<u64, OutOfBounds> {
        let r = self.range("load_u64", offset, 8)?;
        Ok(u64::from_le_bytes(self.bytes[r].try_into().unwrap()))
    }

    pub fn store_u8(&mut self, offset: u64, value: u8) -> Result<(), OutOfBounds> {
        let r = self.range("store_u8", offset, 1)?;
        self.bytes[r.start] = value;
        Ok(())
    }

    pub fn store_u64(&mut self, offset: u64, value: u64) -> Result<(), OutOfBounds> {
        let r = self.range("store_u64", offset, 8)?;
        self.bytes[r].copy_from_slice(&value.to_le_bytes());
        Ok(())
    }

    /// Copies the call's input into a fresh block.
    pub fn set_input(&mut self, data: &[u8]) -> Result<(), InputTooLarge> {
        if data.is_empty() {
            self.input = (0, 0);
            return Ok(());
        }
        let offset = self.alloc_bytes(data);
        if offset == 0 {
            return Err(InputTooLarge {
                len: data.len() as u64,
                limit: self.limit,
            });
        }
        self.input = (offset, data.len() as u64);
        Ok(())
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

    fn input_range(
        &self,
        operation: &'static str,
        at: u64,
        width: u64,
    ) -> Result<std::ops::Range<usize>, OutOfBounds> {
        let (start, len) = self.input;
        match at.checked_add(width) {
            Some(end) if end <= len => Ok((start + at) as usize..(start + end) as usize),
            _ => Err(OutOfBounds {
                operation,
                offset: at,
                width,
                size: len,
            }),
        }
    }

    pub fn input_load_u8(&self, at: u64) -> Result<u8, OutOfBounds> {
        let r = self.input_range("input_load_u8", at, 1)?;
        Ok(self.bytes[r.start])
    }

    pub fn input_load_u64(&self, at: u64) -> Result<u64, OutOfBounds> {
        let r = self.input_range("input_load_u64", at, 8)?;
        Ok(u64::from_le_bytes(self.bytes[r].try_into().unwrap()))
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
    pub fn output(&self) -> &[u8] {
        let (offset, len) = self.output;
        self.slice("output", offset, len).unwrap_or_default()
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
    pub fn error(&self) -> Option<&[u8]> {
        self.block(self.error).filter(|b| !b.is_empty())
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

    #[test]
    fn alloc_store_load_roundtrip() {
        let mut m = ExtismMemory::new(1 << 20);
        let h = m.alloc(16);
        assert!(h >= BASE);
        m.store_u64(h, 0x0102030405060708).unwrap();
        m.store_u8(h + 8, 9).unwrap();
        assert_eq!(m.load_u64(h).unwrap(), 0x0102030405060708);
        assert_eq!(m.load_u8(h + 8).unwrap(), 9);
        assert_eq!(m.length(h), 16);
        assert_eq!(m.length(h + 1), 0, "length only answers for block starts");
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
        let mut m = ExtismMemory::new(1 << 20);
        let h = m.alloc(8);
        assert!(m.load_u64(u64::MAX - 3).is_err());
        assert!(m.load_u64(h + 1).is_err(), "straddles the end");
        assert!(m.load_u8(0).is_err(), "null");
        assert!(m.store_u64(1 << 40, 1).is_err());
        assert!(m.set_output(u64::MAX, 16).is_err());
        assert!(m.set_output(1 << 40, 1 << 40).is_err());
        assert!(m.input_load_u64(1 << 40).is_err());
        m.free(987654321);
        m.free(0);
        assert!(m.slice("x", u64::MAX, 2).is_err());
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
    fn input_and_output() {
        let mut m = ExtismMemory::new(1 << 20);
        m.set_input(b"hello world").unwrap();
        assert_eq!(m.input_length(), 11);
        assert_eq!(
            m.input_load_u64(0).unwrap(),
            u64::from_le_bytes(*b"hello wo")
        );
        assert_eq!(m.input_load_u8(10).unwrap(), b'd');
        assert!(m.input_load_u64(4).is_err());
        let out = m.alloc_bytes(b"result");
        m.set_output(out, 6).unwrap();
        assert_eq!(m.output(), b"result");
        m.reset();
        assert_eq!(m.output(), b"");
        assert_eq!(m.input_length(), 0);
    }

    #[test]
    fn error_must_name_a_block() {
        let mut m = ExtismMemory::new(1 << 20);
        m.set_error(1 << 40);
        assert!(m.error().is_none());
        let e = m.alloc_bytes(b"boom");
        m.set_error(e);
        assert_eq!(m.error(), Some(&b"boom"[..]));
    }
}
