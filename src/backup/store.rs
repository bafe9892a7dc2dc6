//! Where backups live: `s3://BUCKET/PREFIX` on any S3-compatible store (endpoint, region
//! and credentials from the standard `AWS_*` variables, `AWS_ENDPOINT_URL` included) or
//! `file:///path`, through the `object_store` crate (no hand-written client). Its async API
//! runs on a current-thread runtime owned by the [`Store`]. Connecting times out after 5 s
//! and a request is retried twice only, so an unreachable endpoint fails in seconds; a
//! transfer itself is not timed (a large backup on a slow link must finish).

use super::{BackupError, Index, INDEX_FORMAT};
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::sync::Arc;
use std::time::Duration;

/// The largest public index read.
const MAX_INDEX: u64 = 1 << 20;

/// A backup location.
pub struct Store {
    url: String,
    inner: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.url)
    }
}

impl Store {
    /// Open `url` (`s3://BUCKET[/PREFIX]` or `file:///PATH`); `create` makes a missing
    /// local directory (for `push`).
    pub fn open(url: &str, create: bool) -> Result<Store, BackupError> {
        let fail = |message: String| BackupError::Store {
            url: url.to_string(),
            message,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fail(format!("cannot start the I/O runtime: {e}")))?;
        let (inner, prefix): (Arc<dyn ObjectStore>, String) =
            if let Some(rest) = url.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(fail("expected `s3://BUCKET/PREFIX`".into()));
                }
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(object_store::RetryConfig {
                        backoff: object_store::BackoffConfig::default(),
                        max_retries: 2,
                        retry_timeout: Duration::from_secs(20),
                    })
                    .with_client_options(
                        object_store::ClientOptions::new()
                            .with_connect_timeout(Duration::from_secs(5))
                            // The request timeout covers the body: a 1 GiB backup on a slow
                            // link must not be cut, so only connecting is timed.
                            .with_timeout_disabled(),
                    );
                // An endpoint the operator spelled `http://` (a store on the same host or
                // network) is used as spelled: the objects are encrypted either way.
                let endpoint = std::env::var("AWS_ENDPOINT_URL_S3")
                    .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
                    .or_else(|_| std::env::var("AWS_ENDPOINT"))
                    .unwrap_or_default();
                if endpoint.starts_with("http://") {
                    b = b.with_allow_http(true);
                }
                let s3 = b.build().map_err(|e| fail(e.to_string()))?;
                (Arc::new(s3), prefix.trim_matches('/').to_string())
            } else if let Some(path) = url.strip_prefix("file://") {
                if !path.starts_with('/') {
                    return Err(fail("expected `file:///ABSOLUTE/PATH`".into()));
                }
                if create {
                    std::fs::create_dir_all(path).map_err(|e| fail(e.to_string()))?;
                }
                let local = object_store::local::LocalFileSystem::new_with_prefix(path)
                    .map_err(|e| fail(e.to_string()))?;
                (Arc::new(local), String::new())
            } else {
                return Err(fail(
                    "expected `s3://BUCKET/PREFIX` or `file:///PATH`".into(),
                ));
            };
        Ok(Store {
            url: url.to_string(),
            inner,
            prefix: ObjectPath::from(prefix),
            runtime,
        })
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, name: &str) -> ObjectPath {
        self.prefix.clone().join(name)
    }

    /// A store error: its message on one line (it may quote a key of the bucket).
    fn fail(&self, message: impl std::fmt::Display) -> BackupError {
        BackupError::Store {
            url: self.url.clone(),
            message: crate::printable::line(&message.to_string()).into_owned(),
        }
    }

    /// Upload a backup: the encrypted object first, its index last, so an upload that
    /// stops on the way never lists.
    pub fn push(&self, index: &Index, ciphertext: Vec<u8>) -> Result<(), BackupError> {
        let json = serde_json::to_vec_pretty(index).map_err(|e| self.fail(e))?;
        self.runtime.block_on(async {
            self.inner
                .put(&self.path(&index.object()), PutPayload::from(ciphertext))
                .await
                .map_err(|e| self.fail(e))?;
            self.inner
                .put(
                    &self.path(&format!("{}.json", index.id)),
                    PutPayload::from(json),
                )
                .await
                .map_err(|e| self.fail(e))?;
            Ok(())
        })
    }

    /// Every backup, newest first: the indexes whose encrypted object is there with the
    /// size the index says. Objects without an index (an upload that stopped) and indexes
    /// that do not parse are left out; the second list names them.
    pub fn list(&self) -> Result<(Vec<Index>, Vec<String>), BackupError> {
        let metas = self.runtime.block_on(async {
            let mut out = Vec::new();
            let mut stream = self.inner.list(Some(&self.prefix));
            while let Some(m) = stream.next().await {
                out.push(m.map_err(|e| self.fail(e))?);
            }
            Ok::<_, BackupError>(out)
        })?;
        let sizes: std::collections::BTreeMap<String, u64> = metas
            .iter()
            .filter_map(|m| Some((m.location.filename()?.to_string(), m.size)))
            .collect();
        let mut found = Vec::new();
        let mut skipped = Vec::new();
        for (name, size) in &sizes {
            let Some(id) = name.strip_suffix(".json") else {
                if let Some(id) = name.strip_suffix(".age") {
                    if !sizes.contains_key(&format!("{id}.json")) {
                        skipped.push(format!("{name}: no index (an upload that did not finish)"));
                    }
                }
                continue;
            };
            if *size > MAX_INDEX {
                skipped.push(format!("{name}: {size} bytes, not an index"));
                continue;
            }
            let index = match self.get(name, MAX_INDEX).and_then(|b| {
                serde_json::from_slice::<Index>(&b).map_err(|e| self.fail(format!("{name}: {e}")))
            }) {
                // Its fields reach terminals and runbooks: only well-formed ones.
                Ok(i)
                    if i.format == INDEX_FORMAT
                        && i.id == id
                        && super::is_id(id)
                        && super::check::unix_of(&i.created).is_some()
                        && i.size <= super::MAX_OBJECT
                        && i.sha256.len() == 64
                        && i.sha256.bytes().all(|c| c.is_ascii_hexdigit()) =>
                {
                    i
                }
                Ok(_) => {
                    skipped.push(format!("{name}: not a capstan backup index"));
                    continue;
                }
                Err(e) => {
                    skipped.push(format!("{name}: {e}"));
                    continue;
                }
            };
            match sizes.get(&index.object()) {
                Some(s) if *s == index.size => found.push(index),
                Some(s) => skipped.push(format!(
                    "{}: {s} bytes, its index says {}",
                    index.object(),
                    index.size
                )),
                None => skipped.push(format!("{name}: its object {} is missing", index.object())),
            }
        }
        found.sort_by(|a, b| b.id.cmp(&a.id));
        Ok((found, skipped))
    }

    /// The bytes of object `name` (under the prefix), at most `cap`.
    pub fn get(&self, name: &str, cap: u64) -> Result<Vec<u8>, BackupError> {
        self.runtime.block_on(async {
            let r = self
                .inner
                .get(&self.path(name))
                .await
                .map_err(|e| self.fail(e))?;
            if r.meta.size > cap {
                return Err(self.fail(format!("{name}: {} bytes, more than {cap}", r.meta.size)));
            }
            let mut out = Vec::with_capacity(r.meta.size.min(cap) as usize);
            let mut stream = r.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.fail(e))?;
                if (out.len() + chunk.len()) as u64 > cap {
                    return Err(self.fail(format!("{name}: more than {cap} bytes")));
                }
                out.extend_from_slice(&chunk);
            }
            Ok(out)
        })
    }
}
