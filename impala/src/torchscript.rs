//! The TorchScript module of `model.custom_model` as a run holds it ([`ScriptModule`]), and
//! the model factory that loads it ([`ScriptedModel`]).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use impala_config::ValidatedConfig;
use impala_core::{CustomModel, EnvSpec};
use impala_learner::{Model, ModelFactory, ModelSettings};
use tch::Device;

use crate::checkpoint::sha256_hex;
use crate::settings;
use crate::{ImpalaError, Result};

/// The private copy's file name.
const COPY_NAME: &str = "module.pt";

/// A run's TorchScript module (`model.custom_model = "model.pt"`): its bytes and their
/// SHA-256, read once when the run starts, and a private copy on disk (in a folder only this
/// user can read, removed with the module) that the learner and the env runners load.
/// Checkpoints and remote env runners get these bytes, so what they keep or act with is the
/// module the run trains, whatever becomes of the file it was read from: deleted, edited, or
/// an older checkpoint's copy that checkpoint retention removed while a resumed run goes on.
#[derive(Debug)]
pub(crate) struct ScriptModule {
    bytes: Vec<u8>,
    sha256: String,
    /// Where the module was read from (or `(remote session)`), for messages.
    source: PathBuf,
    copy: tempfile::TempDir,
}

impl ScriptModule {
    /// Reads the module at `path`.
    pub(crate) fn read(path: &Path) -> Result<Self> {
        let bytes = fs::read(path).map_err(|e| ImpalaError::io("read", path, e))?;
        Self::new(bytes, path)
    }

    /// The module in `bytes`, read from `source`, with its private copy written.
    pub(crate) fn new(bytes: Vec<u8>, source: &Path) -> Result<Self> {
        let tmp = std::env::temp_dir();
        let mut folder = tempfile::Builder::new();
        folder.prefix("impala-module-");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            folder.permissions(fs::Permissions::from_mode(0o700));
        }
        let copy = folder.tempdir().map_err(|e| ImpalaError::io("create a folder in", &tmp, e))?;
        let path = copy.path().join(COPY_NAME);
        fs::write(&path, &bytes).map_err(|e| ImpalaError::io("write", &path, e))?;
        Ok(ScriptModule { sha256: sha256_hex(&bytes), bytes, source: source.to_path_buf(), copy })
    }

    /// The module's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The SHA-256 of its bytes, in hex (as checkpoint manifests write it).
    pub(crate) fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Where it was read from.
    pub(crate) fn source(&self) -> &Path {
        &self.source
    }

    /// The private copy, which models load.
    pub(crate) fn path(&self) -> PathBuf {
        self.copy.path().join(COPY_NAME)
    }
}

/// A run's module, held by the run and by what builds its model.
pub(crate) type SharedModule = Arc<ScriptModule>;

/// The config's model with its TorchScript module loaded from the run's private copy, which
/// lives as long as anything may build the model (an env runner restarted late in the run,
/// each evaluation round's runners).
#[derive(Debug)]
pub(crate) struct ScriptedModel {
    settings: ModelSettings,
    /// Held, not read: the private copy that `settings` names goes with the last holder.
    _module: SharedModule,
}

impl ModelFactory for ScriptedModel {
    fn build(
        &self,
        spec: &EnvSpec,
        device: Device,
        seed: u64,
    ) -> impala_learner::Result<Box<dyn Model>> {
        self.settings.build(spec, device, seed)
    }
}

impl ScriptedModel {
    /// What builds `config`'s model, and its TorchScript module when `model.custom_model`
    /// names one (read now; see [`ScriptModule`]).
    pub(crate) fn for_config(
        config: &ValidatedConfig,
    ) -> Result<(Arc<dyn ModelFactory>, Option<SharedModule>)> {
        let mut settings = settings::model(config);
        let Some(CustomModel::TorchScript(path)) = &settings.custom_model else {
            return Ok((Arc::new(settings), None));
        };
        let module = Arc::new(ScriptModule::read(path)?);
        settings.custom_model = Some(CustomModel::TorchScript(module.path()));
        let factory = ScriptedModel { settings, _module: Arc::clone(&module) };
        Ok((Arc::new(factory), Some(module)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_private_copy_holds_the_bytes_read_and_goes_with_the_module() -> Result<()> {
        let dir =
            tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("tmp"), e))?;
        let original = dir.path().join("model.pt");
        fs::write(&original, b"module bytes")
            .map_err(|e| ImpalaError::io("write", &original, e))?;
        let module = ScriptModule::read(&original)?;
        // The original can go: the run keeps what it read.
        fs::remove_file(&original).map_err(|e| ImpalaError::io("remove", &original, e))?;
        let copy = module.path();
        let read = fs::read(&copy).map_err(|e| ImpalaError::io("read", &copy, e))?;
        assert_eq!((read.as_slice(), module.bytes()), (&b"module bytes"[..], &b"module bytes"[..]));
        assert_eq!(module.sha256(), sha256_hex(b"module bytes"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let folder = copy.parent().unwrap_or(&copy);
            let mode = fs::metadata(folder)
                .map_err(|e| ImpalaError::io("stat", folder, e))?
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the copy's folder is private: {mode:o}");
        }
        drop(module);
        assert!(!copy.exists());
        Ok(())
    }
}
