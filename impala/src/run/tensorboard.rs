//! TensorBoard event files, written by hand: the TFRecord framing (length, masked CRC-32C, data,
//! masked CRC-32C) around a minimal protobuf `Event { wall_time, step, summary { value { tag,
//! simple_value } } }`. This is all TensorBoard needs to plot scalars, and it spares a protobuf
//! or TensorFlow dependency (the crates that write event files, `tensorboard-rs`, `tboard` and
//! `tfrecord`, pull in protobuf code generation or images, and all open their file with
//! truncation).

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{ImpalaError, Result};

/// The tag under which every event holds its iteration (Tune's logger writes every flattened
/// result key as `ray/tune/<key>`), used to rewind and copy event files by iteration.
pub const ITERATION_TAG: &str = "ray/tune/training_iteration";

/// The `<n>` of event file names: files this process created so far.
static FILES_CREATED: AtomicU64 = AtomicU64::new(0);

/// Writes scalar summaries to one event file, as Tune's TensorBoard logger does (tags
/// `ray/tune/<flattened result key>`). The file is
/// `events.out.tfevents.<unix seconds>.<microseconds>.<host>.<pid>.<n>`: TensorFlow's name with
/// the sub-second time added, so files sort in creation order and no two writers, not even two
/// processes resuming the same run within one second, share a name. A file is never opened
/// over an existing one (`create_new`).
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
        let mut w = Self::create_new(dir, now)?;
        let mut event = Vec::new();
        put_double(&mut event, 1, now);
        put_bytes(&mut event, 3, b"brain.Event:2");
        w.write_record(&event)?;
        Ok(w)
    }

    /// Opens a new, uniquely named, empty event file in `dir`.
    fn create_new(dir: &Path, now: f64) -> Result<Self> {
        let host = hostname();
        let pid = std::process::id();
        let secs = now.trunc() as u64;
        let micros = ((now.fract() * 1e6) as u64).min(999_999);
        let mut tries = 0;
        loop {
            let n = FILES_CREATED.fetch_add(1, Ordering::Relaxed);
            let path =
                dir.join(format!("events.out.tfevents.{secs:010}.{micros:06}.{host}.{pid}.{n}"));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => return Ok(EventWriter { path, out: BufWriter::new(file) }),
                // Another process with our PID (a container's PID 1, a recycled PID) wrote
                // here in the same microsecond: take the next number.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 100 => {
                    tries += 1;
                }
                Err(e) => return Err(ImpalaError::io("create", &path, e)),
            }
        }
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

    /// Flushes and fsyncs the file.
    fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.out.get_ref().sync_all().map_err(|e| ImpalaError::io("sync", &self.path, e))
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

/// What [`copy_events_upto`] did with one event file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventsCopied {
    /// Scalar events kept.
    pub kept: u64,
    /// Scalar events dropped (iterations after the last one kept).
    pub dropped: u64,
    /// Whether the file ended in a partial record (a crash mid-write), which was dropped.
    pub partial_tail: bool,
}

/// Copies the records of event file `src` up to iteration `last` (by each event's
/// [`ITERATION_TAG`] scalar; records without one, such as the file-version record, are kept)
/// to a new file `dst`, byte for byte, so wall times and steps stay as they were. A partial
/// last record (a crash mid-write) is dropped; any other damage is an error naming the file.
/// `dst` is fsynced; an existing `dst` is never overwritten.
pub fn copy_events_upto(src: &Path, dst: &Path, last: u64) -> Result<EventsCopied> {
    let file = File::open(src).map_err(|e| ImpalaError::io("read", src, e))?;
    let mut records = Records { input: BufReader::new(file), path: src };
    let out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dst)
        .map_err(|e| ImpalaError::io("create", dst, e))?;
    let mut writer = EventWriter { path: dst.to_path_buf(), out: BufWriter::new(out) };
    let mut copied = EventsCopied::default();
    loop {
        let data = match records.next_record() {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(RecordError::PartialTail) => {
                copied.partial_tail = true;
                break;
            }
            Err(RecordError::Corrupt(e)) => return Err(e),
        };
        match event_iteration(&data).map_err(|reason| corrupt(src, reason))? {
            Some(iteration) if iteration > last as f64 => copied.dropped += 1,
            Some(_) => {
                copied.kept += 1;
                writer.write_record(&data)?;
            }
            None => writer.write_record(&data)?,
        }
    }
    writer.sync()?;
    Ok(copied)
}

fn corrupt(path: &Path, reason: &str) -> ImpalaError {
    ImpalaError::CorruptEventFile { path: path.to_path_buf(), reason: reason.to_string() }
}

/// The [`ITERATION_TAG`] value of one event record, if it has one.
fn event_iteration(data: &[u8]) -> std::result::Result<Option<f64>, &'static str> {
    for (field, value) in Fields::new(data) {
        let (5, Field::Bytes(summary)) = (field, value?) else { continue };
        for (field, value) in Fields::new(summary) {
            let (1, Field::Bytes(v)) = (field, value?) else { continue };
            let (mut tag, mut val) = (None, None);
            for (f, x) in Fields::new(v) {
                match (f, x?) {
                    (1, Field::Bytes(t)) => tag = Some(t),
                    (2, Field::Fixed32(bits)) => val = Some(f64::from(f32::from_bits(bits))),
                    _ => {}
                }
            }
            if tag == Some(ITERATION_TAG.as_bytes()) {
                return Ok(val);
            }
        }
    }
    Ok(None)
}

enum RecordError {
    /// The file ends inside a record.
    PartialTail,
    /// A checksum does not match.
    Corrupt(ImpalaError),
}

/// Reads TFRecord records one at a time, checking both checksums.
struct Records<'a, R> {
    input: R,
    path: &'a Path,
}

impl<R: Read> Records<'_, R> {
    fn next_record(&mut self) -> std::result::Result<Option<Vec<u8>>, RecordError> {
        let mut header = [0u8; 12];
        match read_full(&mut self.input, &mut header) {
            Ok(0) => return Ok(None),
            Ok(12) => {}
            Ok(_) => return Err(RecordError::PartialTail),
            Err(e) => return Err(RecordError::Corrupt(ImpalaError::io("read", self.path, e))),
        }
        let (len_bytes, len_crc) = header.split_at(8);
        if masked_crc32c(len_bytes).to_le_bytes() != len_crc {
            return Err(RecordError::Corrupt(corrupt(self.path, "length checksum mismatch")));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(len_bytes);
        let len = usize::try_from(u64::from_le_bytes(len8))
            .ok()
            .filter(|&l| l < 1 << 30)
            .ok_or_else(|| RecordError::Corrupt(corrupt(self.path, "record too long")))?;
        let mut data = vec![0u8; len + 4];
        match read_full(&mut self.input, &mut data) {
            Ok(n) if n == data.len() => {}
            Ok(_) => return Err(RecordError::PartialTail),
            Err(e) => return Err(RecordError::Corrupt(ImpalaError::io("read", self.path, e))),
        }
        let crc = data.split_off(len);
        if masked_crc32c(&data).to_le_bytes()[..] != crc[..] {
            return Err(RecordError::Corrupt(corrupt(self.path, "data checksum mismatch")));
        }
        Ok(Some(data))
    }
}

/// Reads until `buf` is full or the input ends; the number of bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
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
    let file = File::open(path).map_err(|e| ImpalaError::io("read", path, e))?;
    let mut records = Records { input: BufReader::new(file), path };
    let mut out = Vec::new();
    loop {
        let data = match records.next_record() {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(RecordError::PartialTail) => return Err(corrupt(path, "truncated record")),
            Err(RecordError::Corrupt(e)) => return Err(e),
        };
        let mut step = 0i64;
        let mut summary: Option<&[u8]> = None;
        for (field, value) in Fields::new(&data) {
            match (field, value.map_err(|r| corrupt(path, r))?) {
                (2, Field::Varint(v)) => step = v as i64,
                (5, Field::Bytes(b)) => summary = Some(b),
                _ => {}
            }
        }
        for (field, value) in Fields::new(summary.unwrap_or(&[])) {
            let (1, Field::Bytes(v)) = (field, value.map_err(|r| corrupt(path, r))?) else {
                continue;
            };
            let (mut tag, mut val) = (String::new(), f64::NAN);
            for (f, x) in Fields::new(v) {
                match (f, x.map_err(|r| corrupt(path, r))?) {
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

    fn tmp() -> Result<tempfile::TempDir> {
        tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("tmp"), e))
    }

    fn iteration(i: u64) -> Vec<(String, f64)> {
        vec![(ITERATION_TAG.to_string(), i as f64), ("ray/tune/x".to_string(), 0.5)]
    }

    #[test]
    fn writers_created_at_once_get_distinct_files_and_never_truncate() -> Result<()> {
        let dir = tmp()?;
        let mut first = EventWriter::create(dir.path())?;
        first.add_scalars(1, &iteration(1))?;
        first.flush()?;
        // Same second, same process: before, the second file replaced the first one.
        let writers: Vec<EventWriter> =
            (0..5).map(|_| EventWriter::create(dir.path())).collect::<Result<_>>()?;
        let mut names: Vec<_> = writers.iter().map(|w| w.path().to_path_buf()).collect();
        names.push(first.path().to_path_buf());
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 6);
        assert_eq!(read_scalars(first.path())?.len(), 2);
        let name = first.path().file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let parts: Vec<&str> = name.split('.').collect();
        assert_eq!(&parts[..3], ["events", "out", "tfevents"], "{name}");
        assert_eq!((parts[3].len(), parts[4].len()), (10, 6), "{name}");
        assert!(name.contains(&format!(".{}.", std::process::id())), "{name}");
        Ok(())
    }

    #[test]
    fn copy_upto_keeps_earlier_iterations_byte_for_byte_and_drops_a_partial_tail() -> Result<()> {
        let dir = tmp()?;
        let mut tb = EventWriter::create(dir.path())?;
        for i in 1..=6 {
            tb.add_scalars(100 * i as i64, &iteration(i))?;
        }
        tb.flush()?;
        let src = tb.path().to_path_buf();
        drop(tb);
        let dst = dir.path().join("copy");
        let copied = copy_events_upto(&src, &dst, 4)?;
        assert_eq!(copied, EventsCopied { kept: 4, dropped: 2, partial_tail: false });
        let got = read_scalars(&dst)?;
        assert_eq!(got.len(), 8);
        assert_eq!(got.last().map(|(s, _, _)| *s), Some(400));
        let (a, b) = (
            std::fs::read(&src).map_err(|e| ImpalaError::io("read", &src, e))?,
            std::fs::read(&dst).map_err(|e| ImpalaError::io("read", &dst, e))?,
        );
        assert!(a.starts_with(&b), "the kept records are the original bytes");
        // Never over an existing file.
        assert!(copy_events_upto(&src, &dst, 4).is_err());
        // A crash mid-record: the partial record is dropped, everything before is kept.
        let cut = dir.path().join("cut");
        std::fs::write(&cut, &a[..a.len() - 7]).map_err(|e| ImpalaError::io("write", &cut, e))?;
        let copied = copy_events_upto(&cut, &dir.path().join("cut-copy"), 10)?;
        assert_eq!(copied, EventsCopied { kept: 5, dropped: 0, partial_tail: true });
        assert!(matches!(read_scalars(&cut), Err(ImpalaError::CorruptEventFile { .. })));
        Ok(())
    }
}
