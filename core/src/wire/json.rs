//! JSON helpers shared by the message encoder, the result budget and the
//! audit chain (`mcp-stdio-audit`): serializing into a `Vec` under a byte
//! limit, and removing the whitespace raw values carry.

use std::io;

/// Removes whitespace outside JSON strings, in place, from `start` on.
///
/// Expects valid JSON; on any input it only ever deletes bytes. Raw values
/// embedded in a serialized value keep their whitespace (newlines included);
/// this makes them compact, so the result fits on one line.
///
/// ```
/// use mcp_stdio_core::compact_json_in_place;
///
/// let mut buf = b"x{ \"a\" : [1, 2],\n \"b\": \"c d\" }".to_vec();
/// compact_json_in_place(&mut buf, 1);
/// assert_eq!(buf, br#"x{"a":[1,2],"b":"c d"}"#);
/// ```
pub fn compact_json_in_place(buf: &mut Vec<u8>, start: usize) {
    let mut write = start;
    let mut in_string = false;
    let mut escaped = false;
    for read in start..buf.len() {
        let b = buf[read];
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' => continue,
                b'"' => in_string = true,
                _ => {}
            }
        }
        buf[write] = b;
        write += 1;
    }
    buf.truncate(write);
}

/// A writer that appends to a `Vec` and refuses to grow it past `limit`
/// bytes (counting what the `Vec` held before): a write that would pass the
/// limit writes nothing, fails, and is remembered
/// ([`overflowed`](Self::overflowed)), so a caller of
/// `serde_json::to_writer` can tell the limit from a serialization error.
///
/// Memory: the `Vec` never holds more than `limit` bytes through it.
///
/// ```
/// use mcp_stdio_core::LimitedWriter;
///
/// let mut buf = Vec::new();
/// let mut writer = LimitedWriter::new(&mut buf, 8);
/// assert!(serde_json::to_writer(&mut writer, &"a long string").is_err());
/// assert!(writer.overflowed());
/// ```
#[derive(Debug)]
pub struct LimitedWriter<'a> {
    buf: &'a mut Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl<'a> LimitedWriter<'a> {
    /// A writer appending to `buf` until it holds `limit` bytes.
    pub fn new(buf: &'a mut Vec<u8>, limit: usize) -> Self {
        Self {
            buf,
            limit,
            overflowed: false,
        }
    }

    /// True once a write was refused for the limit.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }
}

impl io::Write for LimitedWriter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            self.overflowed = true;
            return Err(io::Error::other("limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
