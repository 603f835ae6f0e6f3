//! TensorBoard event files, written by hand: the TFRecord framing (length, masked CRC-32C, data,
//! masked CRC-32C) around a minimal protobuf `Event { wall_time, step, summary { value { tag,
//! simple_value } } }`. This is all TensorBoard needs to plot scalars, and it spares a protobuf
//! or TensorFlow dependency.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::{ImpalaError, Result};

/// Writes scalar summaries to one `events.out.tfevents.<time>.<host>` file, as Tune's TensorBoard
/// logger does (tags `ray/tune/<flattened result key>`).
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// Creates a new event file in `dir` and writes the `brain.Event:2` file-version record.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let mut tb = impala::EventWriter::create(dir.path())?;
    /// tb.add_scalars(1, &[("ray/tune/episode_return_mean".to_string(), 21.5)])?;
    /// tb.flush()?;
    /// let records = impala::tensorboard::read_scalars(tb.path())?;
    /// assert_eq!(records, vec![(1, "ray/tune/episode_return_mean".to_string(), 21.5)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create(dir: &Path) -> Result<Self> {
        let now = wall_time();
        let host = hostname();
        let path = dir.join(format!("events.out.tfevents.{}.{host}", now as u64));
        let file = File::create(&path).map_err(|e| ImpalaError::io("create", &path, e))?;
        let mut w = EventWriter { path, out: BufWriter::new(file) };
        let mut event = Vec::new();
        put_double(&mut event, 1, now);
        put_bytes(&mut event, 3, b"brain.Event:2");
        w.write_record(&event)?;
        Ok(w)
    }

    /// The event file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one event holding every `(tag, value)` at `step`. Non-finite values are skipped
    /// (TensorBoard cannot plot them and RLlib reports `nan` before the first episode ends).
    pub fn add_scalars(&mut self, step: i64, scalars: &[(String, f64)]) -> Result<()> {
        let mut summary = Vec::new();
        for (tag, value) in scalars.iter().filter(|(_, v)| v.is_finite()) {
            let mut v = Vec::new();
            put_bytes(&mut v, 1, tag.as_bytes());
            put_float(&mut v, 2, *value as f32);
            put_bytes(&mut summary, 1, &v);
        }
        let mut event = Vec::new();
        put_double(&mut event, 1, wall_time());
        put_varint_field(&mut event, 2, step as u64);
        put_bytes(&mut event, 5, &summary);
        self.write_record(&event)
    }

    /// Flushes buffered events to the file.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| ImpalaError::io("write", &self.path, e))
    }

    fn write_record(&mut self, data: &[u8]) -> Result<()> {
        let len = (data.len() as u64).to_le_bytes();
        let mut rec = Vec::with_capacity(data.len() + 16);
        rec.extend_from_slice(&len);
        rec.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
        rec.extend_from_slice(data);
        rec.extend_from_slice(&masked_crc32c(data).to_le_bytes());
        self.out.write_all(&rec).map_err(|e| ImpalaError::io("write", &self.path, e))
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        // Best effort: an unflushable event file must not turn a clean exit into a panic.
        let _ = self.out.flush();
    }
}

/// TFRecord's checksum: CRC-32C rotated right by 15 bits plus a constant.
fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn put_varint_field(buf: &mut Vec<u8>, field: u32, v: u64) {
    put_varint(buf, u64::from(field) << 3);
    put_varint(buf, v);
}

fn put_double(buf: &mut Vec<u8>, field: u32, v: f64) {
    put_varint(buf, (u64::from(field) << 3) | 1);
    buf.extend_from_slice(&v.to_le_bytes());
}

fn put_float(buf: &mut Vec<u8>, field: u32, v: f32) {
    put_varint(buf, (u64::from(field) << 3) | 5);
    buf.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(buf: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_varint(buf, (u64::from(field) << 3) | 2);
    put_varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

fn wall_time() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The machine's host name (TensorBoard's file-name convention), `localhost` if unknown.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| {
            !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        })
        .unwrap_or_else(|| "localhost".into())
}

/// Reads back every scalar `(step, tag, value)` from an event file, checking both checksums of
/// every record. It understands exactly what [`EventWriter`] writes (and skips unknown fields),
/// which is enough to check files in tests and scripts without TensorBoard.
pub fn read_scalars(path: &Path) -> Result<Vec<(i64, String, f64)>> {
    let bytes = std::fs::read(path).map_err(|e| ImpalaError::io("read", path, e))?;
    let corrupt = |reason: &str| ImpalaError::CorruptEventFile {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let header = bytes.get(pos..pos + 12).ok_or_else(|| corrupt("truncated record header"))?;
        let (len_bytes, len_crc) = header.split_at(8);
        if masked_crc32c(len_bytes).to_le_bytes() != len_crc {
            return Err(corrupt("length checksum mismatch"));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(len_bytes);
        let len =
            usize::try_from(u64::from_le_bytes(len8)).map_err(|_| corrupt("record too long"))?;
        let data =
            bytes.get(pos + 12..pos + 12 + len).ok_or_else(|| corrupt("truncated record"))?;
        let crc = bytes
            .get(pos + 12 + len..pos + 16 + len)
            .ok_or_else(|| corrupt("truncated checksum"))?;
        if masked_crc32c(data).to_le_bytes() != crc {
            return Err(corrupt("data checksum mismatch"));
        }
        pos += 16 + len;
        let mut step = 0i64;
        let mut summary: Option<&[u8]> = None;
        for (field, value) in Fields::new(data) {
            match (field, value.map_err(&corrupt)?) {
                (2, Field::Varint(v)) => step = v as i64,
                (5, Field::Bytes(b)) => summary = Some(b),
                _ => {}
            }
        }
        for (field, value) in Fields::new(summary.unwrap_or(&[])) {
            let (1, Field::Bytes(v)) = (field, value.map_err(&corrupt)?) else { continue };
            let (mut tag, mut val) = (String::new(), f64::NAN);
            for (f, x) in Fields::new(v) {
                match (f, x.map_err(&corrupt)?) {
                    (1, Field::Bytes(t)) => tag = String::from_utf8_lossy(t).into_owned(),
                    (2, Field::Fixed32(bits)) => val = f64::from(f32::from_bits(bits)),
                    _ => {}
                }
            }
            out.push((step, tag, val));
        }
    }
    Ok(out)
}

/// One decoded protobuf field value.
enum Field<'a> {
    Varint(u64),
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// Iterates the `(field number, value)` pairs of one protobuf message.
struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Fields { buf, pos: 0 }
    }

    fn varint(&mut self) -> std::result::Result<u64, &'static str> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err("varint too long")
    }

    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], &'static str> {
        let s = self.buf.get(self.pos..self.pos + n).ok_or("truncated field")?;
        self.pos += n;
        Ok(s)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = (u64, std::result::Result<Field<'a>, &'static str>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let key = match self.varint() {
            Ok(k) => k,
            Err(e) => {
                self.pos = self.buf.len();
                return Some((0, Err(e)));
            }
        };
        let value = match key & 7 {
            0 => self.varint().map(Field::Varint),
            1 => self.take(8).map(|_| Field::Fixed64),
            2 => self.varint().and_then(|n| self.take(n as usize)).map(Field::Bytes),
            5 => self.take(4).map(|b| Field::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            _ => Err("unsupported wire type"),
        };
        if value.is_err() {
            self.pos = self.buf.len();
        }
        Some((key >> 3, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_matches_tensorflow() {
        // TensorFlow's crc32c_test: Value("123456789") = 0xe3069283; Mask = rotr15 + 0xa282ead8.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        let expected = 0xe306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8);
        assert_eq!(masked_crc32c(b"123456789"), expected);
    }

    #[test]
    fn events_round_trip_and_detect_corruption() -> Result<()> {
        let dir =
            tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("tmp"), e))?;
        let mut tb = EventWriter::create(dir.path())?;
        let scalars =
            vec![("a/b".to_string(), 1.5), ("nan".to_string(), f64::NAN), ("c".to_string(), -2.0)];
        tb.add_scalars(7, &scalars)?;
        tb.add_scalars(300_000, &[("a/b".to_string(), 3.25)])?;
        tb.flush()?;
        let got = read_scalars(tb.path())?;
        assert_eq!(
            got,
            vec![(7, "a/b".into(), 1.5), (7, "c".into(), -2.0), (300_000, "a/b".into(), 3.25)]
        );
        // The first record is the file-version event.
        let bytes = std::fs::read(tb.path()).map_err(|e| ImpalaError::io("read", tb.path(), e))?;
        assert!(bytes.windows(13).any(|w| w == b"brain.Event:2"));
        // Flip one payload byte: the data checksum must catch it.
        let mut bad = bytes.clone();
        let last = bad.len() - 6;
        bad[last] ^= 0xff;
        let bad_path = dir.path().join("bad");
        std::fs::write(&bad_path, &bad).map_err(|e| ImpalaError::io("write", &bad_path, e))?;
        assert!(matches!(read_scalars(&bad_path), Err(ImpalaError::CorruptEventFile { .. })));
        Ok(())
    }
}
