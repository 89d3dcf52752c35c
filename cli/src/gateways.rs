//! Saved gateways: names for gateway addresses, each with its CA and its
//! operator token, so commands need no `--gateway` or `--token` once one is
//! selected.
//!
//! They live under the user's configuration directory
//! (`$XDG_CONFIG_HOME/openshell`, else `~/.config/openshell`): the addresses
//! in `gateways.yaml`, each token in `tokens/NAME`. Every file is written
//! through [`SecretFile`], so it is mode 0600 and never written through a
//! symlink; the directories are made 0700.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::exit::UsageError;
use crate::secret_file::SecretFile;

const CONFIG_FILE: &str = "gateways.yaml";
const TOKENS_DIR: &str = "tokens";

/// One saved gateway. The token is not here: it has a file of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedGateway {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
}

/// What `gateways.yaml` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaysFile {
    /// The gateway commands use when neither `--gateway` nor `OPENSHELL_GATEWAY` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<String>,
    #[serde(default)]
    pub gateways: BTreeMap<String, SavedGateway>,
}

/// The directory saved gateways live in.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// `$XDG_CONFIG_HOME/openshell` when that is an absolute path (the XDG
    /// rule: a relative one is ignored), else `$HOME/.config/openshell`.
    pub fn locate() -> Result<Self, UsageError> {
        Self::from_env(
            std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from),
            std::env::var_os("HOME").map(PathBuf::from),
        )
    }

    fn from_env(xdg: Option<PathBuf>, home: Option<PathBuf>) -> Result<Self, UsageError> {
        let base = match (xdg, home) {
            (Some(xdg), _) if xdg.is_absolute() => xdg,
            (_, Some(home)) if home.is_absolute() => home.join(".config"),
            _ => {
                return Err(UsageError(
                    "cannot find the configuration directory for saved gateways: \
                     set XDG_CONFIG_HOME or HOME to an absolute path"
                        .into(),
                ));
            }
        };
        Ok(Self {
            dir: base.join("openshell"),
        })
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join(CONFIG_FILE)
    }

    pub fn token_path(&self, name: &str) -> PathBuf {
        self.dir.join(TOKENS_DIR).join(name)
    }

    /// The saved gateways; none when the file does not exist yet.
    pub fn load(&self) -> anyhow::Result<GatewaysFile> {
        let path = self.config_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Ok(GatewaysFile::default());
            }
            Err(err) => {
                return Err(anyhow::Error::new(err)
                    .context(format!("cannot read saved gateways {}", path.display())));
            }
        };
        if text.trim().is_empty() {
            return Ok(GatewaysFile::default());
        }
        serde_norway::from_str(&text).map_err(|err| {
            UsageError(format!(
                "saved gateways file {} is not valid: {err}; fix or remove it",
                path.display()
            ))
            .into()
        })
    }

    pub fn save(&self, file: &GatewaysFile) -> anyhow::Result<()> {
        make_private_dir(&self.dir)?;
        let text = serde_norway::to_string(file).context("encoding saved gateways")?;
        SecretFile::open(&self.config_path(), true, "saved gateways file", "")?
            .write(text.trim_end())
    }

    /// The saved token of gateway `name`, if one was saved.
    pub fn read_token(&self, name: &str) -> anyhow::Result<Option<String>> {
        let path = self.token_path(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let token = text.trim();
                Ok((!token.is_empty()).then(|| token.to_owned()))
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(anyhow::Error::new(err)
                .context(format!("cannot read the token file {}", path.display()))),
        }
    }

    pub fn write_token(&self, name: &str, token: &str) -> anyhow::Result<PathBuf> {
        let dir = self.dir.join(TOKENS_DIR);
        make_private_dir(&self.dir)?;
        make_private_dir(&dir)?;
        let path = self.token_path(name);
        SecretFile::open(&path, true, "token file", "")?.write(token)?;
        Ok(path)
    }

    /// Removes gateway `name`'s token; whether there was one.
    pub fn remove_token(&self, name: &str) -> anyhow::Result<bool> {
        let path = self.token_path(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(anyhow::Error::new(err)
                .context(format!("cannot remove the token file {}", path.display()))),
        }
    }
}

/// Creates `dir` (and its parents) if missing; a new `dir` is 0700.
fn make_private_dir(dir: &Path) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))
}

/// A saved gateway's name: a DNS label, as sandbox names are, so it is also
/// a safe file name for its token.
pub fn check_name(name: &str) -> Result<(), UsageError> {
    openshell_core::validate_name("gateway name", name).map_err(|v| UsageError(v.to_string()))
}

/// Whether `--gateway`'s value is an address rather than a saved gateway's name.
pub fn is_address(value: &str) -> bool {
    value.contains("://")
}

/// Refuses an address the SDK could not use, naming the expected form.
pub fn check_url(url: &str) -> Result<(), UsageError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(()),
        _ => Err(UsageError(format!(
            "gateway address {url:?} is not valid: expected http://HOST:PORT or https://HOST:PORT"
        ))),
    }
}

/// A name for a gateway added by address alone: its host, as a DNS label.
pub fn name_from_url(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches('-').to_owned();
    check_name(&name).is_ok().then_some(name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_follows_xdg_then_home() {
        let store = Store::from_env(Some("/x".into()), Some("/h".into())).unwrap();
        assert_eq!(store.config_path(), Path::new("/x/openshell/gateways.yaml"));
        // A relative XDG_CONFIG_HOME is ignored, as the XDG rule says.
        let store = Store::from_env(Some("rel".into()), Some("/h".into())).unwrap();
        assert_eq!(
            store.config_path(),
            Path::new("/h/.config/openshell/gateways.yaml")
        );
        let err = Store::from_env(None, None).unwrap_err();
        assert!(err.0.contains("XDG_CONFIG_HOME"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn files_are_private_and_round_trip() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::from_env(Some(dir.path().into()), None).unwrap();
        assert_eq!(store.load().unwrap(), GatewaysFile::default());
        let mut file = GatewaysFile::default();
        file.gateways.insert(
            "prod".into(),
            SavedGateway {
                url: "https://gw:7070".into(),
                ca_cert: Some("/etc/ca.pem".into()),
            },
        );
        file.selected = Some("prod".into());
        store.save(&file).unwrap();
        assert_eq!(store.load().unwrap(), file);
        let token = store.write_token("prod", "tok-1").unwrap();
        assert_eq!(store.read_token("prod").unwrap().as_deref(), Some("tok-1"));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&token), 0o600);
        assert_eq!(mode(&store.config_path()), 0o600);
        assert_eq!(mode(&dir.path().join("openshell/tokens")), 0o700);
        assert!(store.remove_token("prod").unwrap());
        assert!(!store.remove_token("prod").unwrap());
        assert_eq!(store.read_token("prod").unwrap(), None);
    }

    #[test]
    fn a_damaged_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::from_env(Some(dir.path().into()), None).unwrap();
        std::fs::create_dir_all(dir.path().join("openshell")).unwrap();
        std::fs::write(store.config_path(), "gateways: [oops").unwrap();
        let err = store.load().unwrap_err();
        assert!(
            err.to_string()
                .contains(&store.config_path().display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn names_and_addresses() {
        assert!(check_name("prod-1").is_ok());
        assert!(check_name("../x").is_err());
        assert!(check_name("Prod").is_err());
        assert!(is_address("http://a:1") && !is_address("prod"));
        assert!(check_url("https://gw.example.com:7070").is_ok());
        assert!(check_url("gw:7070").is_err());
        assert!(check_url("http://").is_err());
        assert_eq!(
            name_from_url("https://gw.example.com:7070").as_deref(),
            Some("gw-example-com")
        );
        assert_eq!(
            name_from_url("http://127.0.0.1:7070").as_deref(),
            Some("127-0-0-1")
        );
    }
}
