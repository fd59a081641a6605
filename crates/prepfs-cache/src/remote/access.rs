//! What a mount needs of the tier besides its URL ([`Access`]: the values' key, the server's
//! password, the roots TLS trusts), read from the files `cache.remote` names, and why a tier
//! cannot be set up ([`RemoteError`]).

use std::io;

use super::auth::{self, SecretError, ValueKey};

/// A remote tier that cannot be set up (its URL refused by the client, a file it names
/// unusable).
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("cache.remote {url}: {why}")]
    Url { url: String, why: String },
    #[error("cache.remote.{key}: {source}")]
    File { key: &'static str, source: SecretError },
    #[error("cache.remote: cannot start the writer thread: {0}")]
    Writer(#[source] io::Error),
}

/// What a mount needs of the tier besides its URL: the key values are authenticated with, the
/// server's password (`password_file`; else the URL's, if any) and the roots TLS trusts
/// (`tls_ca_file`; else the system's). Its `Debug` shows neither secret.
#[derive(Clone)]
pub struct Access {
    pub key: ValueKey,
    pub password: Option<String>,
    pub(crate) tls_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access").field("password", &self.password.as_ref().map(|_| "***")).field("tls_ca", &self.tls_ca.is_some()).finish()
    }
}

impl Access {
    /// Only the key (the URL's password, if any; the system's roots).
    pub fn with_key(key: ValueKey) -> Access {
        Access { key, password: None, tls_ca: None }
    }

    /// Reads the files `cache.remote` names: each checked as [`auth`] says (the CA file is
    /// public: only read).
    pub fn load(config: &crate::settings::RemoteConfig) -> Result<Access, RemoteError> {
        let key = ValueKey::load(&config.secret_file).map_err(|source| RemoteError::File { key: "secret_file", source })?;
        let password = match &config.password_file {
            Some(path) => Some(auth::read_password(path).map_err(|source| RemoteError::File { key: "password_file", source })?),
            None => None,
        };
        let tls_ca = match &config.tls_ca_file {
            Some(path) => Some(
                std::fs::read(path)
                    .map_err(|e| RemoteError::File { key: "tls_ca_file", source: SecretError::Read { path: path.clone(), source: e } })?,
            ),
            None => None,
        };
        Ok(Access { key, password, tls_ca })
    }
}
