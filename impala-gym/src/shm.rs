//! The shared memory between a runner and one env worker: per env slot, a row of observation
//! values (`f32`, or bytes for a [`impala_core::Space::Bytes`] space), a row for the final
//! observation of an episode the worker has already reset, and a row of `f32` action values.
//!
//! This is the crate's only `unsafe` code: mapping a file that another process writes.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

/// Where each slot's rows live: `[count, obs_dim]` observations, `[count, obs_dim]` final
/// observations (of episodes the worker reset in the step that ended them), then (8-byte
/// aligned) `[count, action_dim]` actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub count: usize,
    pub obs_dim: usize,
    /// Observations are bytes, not `f32`s.
    pub obs_bytes: bool,
    pub action_dim: usize,
}

impl Layout {
    /// Bytes of the whole region.
    pub fn size(&self) -> usize {
        self.action_offset(self.count)
    }

    /// Bytes per observation value.
    fn obs_width(&self) -> usize {
        if self.obs_bytes {
            1
        } else {
            4
        }
    }

    /// The numpy dtype of the observation rows, for the worker.
    pub fn obs_dtype(&self) -> &'static str {
        if self.obs_bytes {
            "uint8"
        } else {
            "float32"
        }
    }

    fn obs_offset(&self, slot: usize) -> usize {
        self.obs_width() * slot * self.obs_dim
    }

    /// Where slot `slot`'s final-observation row starts (`final_offset(0)`: where they start).
    pub fn final_offset(&self, slot: usize) -> usize {
        self.obs_offset(self.count + slot)
    }

    /// Where slot `slot`'s action row starts (`action_offset(0)`: where the actions start).
    pub fn action_offset(&self, slot: usize) -> usize {
        self.final_offset(self.count).next_multiple_of(8) + 4 * slot * self.action_dim
    }
}

/// A mapped file in `/dev/shm` (or the temp folder where there is none). The file is removed
/// as soon as the worker has mapped it too ([`SharedRegion::unlink`]), so nothing is left behind
/// when either process dies.
pub(crate) struct SharedRegion {
    map: MmapMut,
    layout: Layout,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRegion")
            .field("layout", &self.layout)
            .field("path", &self.path)
            .finish()
    }
}

impl SharedRegion {
    /// Creates and maps a zeroed region for `layout`.
    pub fn create(layout: Layout) -> std::io::Result<Self> {
        let folder = Path::new("/dev/shm");
        let folder = if folder.is_dir() { folder.to_path_buf() } else { std::env::temp_dir() };
        let file = tempfile::Builder::new().prefix("impala-gym-").tempfile_in(folder)?;
        let (file, path) = file.keep().map_err(|e| e.error)?;
        file.set_len(layout.size().max(1) as u64)?;
        let map = map(&file)?;
        Ok(SharedRegion { map, layout, path: Some(path) })
    }

    /// The file's path, for the worker to open.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Removes the file (the mappings stay valid).
    pub fn unlink(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Copies slot `slot`'s observation row into `out` (`obs_dim` values; bytes become the
    /// whole numbers `0.0..=255.0`).
    pub fn read_obs(&self, slot: usize, out: &mut [f32]) {
        self.read_row(self.layout.obs_offset(slot), out);
    }

    /// Copies slot `slot`'s final-observation row into `out`, as [`SharedRegion::read_obs`].
    pub fn read_final_obs(&self, slot: usize, out: &mut [f32]) {
        self.read_row(self.layout.final_offset(slot), out);
    }

    fn read_row(&self, offset: usize, out: &mut [f32]) {
        let n = self.layout.obs_dim.min(out.len());
        let width = self.layout.obs_width();
        let bytes = &self.map[offset..][..width * n];
        if self.layout.obs_bytes {
            for (v, &b) in out.iter_mut().zip(bytes) {
                *v = f32::from(b);
            }
        } else {
            for (v, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *v = f32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
    }

    /// Writes `action` (`action_dim` values) into slot `slot`'s action row.
    pub fn write_action(&mut self, slot: usize, action: &[f32]) {
        let n = self.layout.action_dim.min(action.len());
        let offset = self.layout.action_offset(slot);
        let bytes = &mut self.map[offset..][..4 * n];
        for (b, v) in bytes.chunks_exact_mut(4).zip(action) {
            b.copy_from_slice(&v.to_ne_bytes());
        }
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        self.unlink();
    }
}

#[allow(unsafe_code)]
fn map(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: the file was just created under a unique name by this process and is shared with
    // exactly one worker, which (by the protocol in worker.rs) writes a slot's observation and
    // final-observation rows only between a command for that slot and its reply, and never writes action rows. The
    // runner reads a row only after that reply and writes a slot's action row only before its
    // next command, so neither side reads bytes the other is writing. The file is never resized.
    unsafe { MmapMut::map_mut(file) }
}
