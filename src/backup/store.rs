//! Where backups live: `s3://BUCKET/PREFIX` on any S3-compatible store (endpoint, region
//! and credentials from the standard `AWS_*` variables, `AWS_ENDPOINT_URL` included) or
//! `file:///path`, through the `object_store` crate (no hand-written client). Its async API
//! runs on a current-thread runtime owned by the [`Store`]; uploads and downloads stream
//! (a multipart upload of 8 MiB parts, a GET read chunk by chunk), so memory does not grow
//! with the backup.
//!
//! A bucket is untrusted input. Time is bounded by [`Pace`]: connecting 5 s; any read of
//! the socket, and every chunk of a download, within the idle timeout (30 s,
//! `CAPSTAN_BACKUP_TIMEOUT` seconds); every window of twice that must bring 1 MiB (a
//! trickling endpoint fails within about 90 s); a request that is not a stream (a listing,
//! all its pages; an index; starting or completing an upload) within 4× the idle timeout, an upload
//! part within the idle timeout plus its size at that minimum rate. Listings are one
//! level (`/` delimiter: a nested prefix is not listed), keys with control characters are
//! escaped before object_store parses the page (or one such key would fail the listing) and
//! reported, never used; indexes are read one at a time ([`Store::scan`]), and the
//! newest is chosen by [`accept`]. Without credentials in the environment nothing is sent
//! (no instance-metadata probe) unless `AWS_EC2_METADATA_DISABLED=false` opts in.

use super::{is_id, stamp_of, BackupError, Index, INDEX_FORMAT};
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest public index read.
pub(crate) const MAX_INDEX: u64 = 1 << 20;
/// The size of an upload part (S3 wants 5 MiB at least, but the last).
pub(crate) const PART: usize = 8 << 20;
/// How far in this machine's future an index may be dated and still be chosen.
pub(crate) const SKEW: i64 = 300;
/// The most objects one listing holds (names and sizes only).
const MAX_LISTED: usize = 1_000_000;

/// The time budget of a store's requests ([`Store`] module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    /// No byte for this long fails a read.
    pub idle: Duration,
    /// Every window this long must bring `min_bytes`.
    pub window: Duration,
    /// The least bytes a window brings.
    pub min_bytes: u64,
}

impl Default for Pace {
    fn default() -> Self {
        Pace::with_idle(Duration::from_secs(30))
    }
}

impl Pace {
    /// The budget for an idle timeout: a window of twice it, 1 MiB a window.
    pub(crate) fn with_idle(idle: Duration) -> Pace {
        Pace {
            idle,
            window: idle * 2,
            min_bytes: 1 << 20,
        }
    }

    /// From `CAPSTAN_BACKUP_TIMEOUT` (seconds, 1 to 3600), else the default.
    pub(crate) fn from_env() -> Result<Pace, String> {
        match std::env::var("CAPSTAN_BACKUP_TIMEOUT") {
            Err(_) => Ok(Pace::default()),
            Ok(v) => match v.trim().parse::<u64>() {
                Ok(s) if (1..=3600).contains(&s) => Ok(Pace::with_idle(Duration::from_secs(s))),
                _ => Err(format!(
                    "CAPSTAN_BACKUP_TIMEOUT={}: expected seconds, 1 to 3600",
                    crate::printable::line(&v)
                )),
            },
        }
    }

    /// A request that is not a stream.
    pub(crate) fn request(&self) -> Duration {
        self.idle * 4
    }

    /// An upload part of `bytes`: the idle timeout, then the minimum rate.
    pub(crate) fn part(&self, bytes: usize) -> Duration {
        let per_window = self.min_bytes.max(1);
        self.idle + self.window.mul_f64(bytes as f64 / per_window as f64)
    }
}

/// The minimum-throughput rule, fed the bytes of a download as they come.
#[derive(Debug)]
pub(crate) struct Meter {
    pace: Pace,
    start: Instant,
    bytes: u64,
}

impl Meter {
    /// A meter whose first window starts at `now`.
    pub(crate) fn new(pace: Pace, now: Instant) -> Meter {
        Meter {
            pace,
            start: now,
            bytes: 0,
        }
    }

    /// `n` bytes arrived at `now`: an error naming the rate when a whole window brought
    /// less than its minimum.
    pub(crate) fn arrived(&mut self, n: usize, now: Instant) -> Result<(), String> {
        self.bytes += n as u64;
        let elapsed = now.saturating_duration_since(self.start);
        if elapsed >= self.pace.window {
            if self.bytes < self.pace.min_bytes {
                return Err(format!(
                    "{} bytes in {} s, less than {} KiB in {} s: the endpoint trickles",
                    self.bytes,
                    elapsed.as_secs(),
                    self.pace.min_bytes >> 10,
                    self.pace.window.as_secs()
                ));
            }
            self.start = now;
            self.bytes = 0;
        }
        Ok(())
    }
}

/// A backup location.
pub(crate) struct Store {
    url: String,
    /// Where requests go, for messages.
    endpoint: String,
    bucket: Option<String>,
    inner: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    runtime: tokio::runtime::Runtime,
    pace: Pace,
    /// A `file://` store's directory: downloads read it directly (object_store's local
    /// reads hand every 8 KiB chunk to a blocking thread).
    local: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.url)
    }
}

/// The credential variables that let a request be signed without asking the instance
/// metadata service; `None` when there are some, else what to tell the operator.
pub(crate) fn missing_credentials(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let set = |k: &str| env(k).is_some_and(|v| !v.is_empty());
    let key = set("AWS_ACCESS_KEY_ID");
    let secret = set("AWS_SECRET_ACCESS_KEY");
    if key && secret
        || set("AWS_WEB_IDENTITY_TOKEN_FILE")
        || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || set("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        || env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("false"))
    {
        return None;
    }
    let half = match (key, secret) {
        (true, false) => "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; ",
        (false, true) => "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not; ",
        _ => "",
    };
    Some(format!(
        "no credentials: {half}set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
         AWS_SESSION_TOKEN for temporary ones), or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN; \
         to use an EC2 instance role, set AWS_EC2_METADATA_DISABLED=false (capstan does not ask \
         the instance metadata service otherwise); nothing was sent"
    ))
}

impl Store {
    /// Open `url` (`s3://BUCKET[/PREFIX]` or `file:///PATH`); `create` makes a missing
    /// local directory (for `push`).
    pub(crate) fn open(url: &str, create: bool) -> Result<Store, BackupError> {
        let fail = |message: String| BackupError::Store {
            url: crate::printable::line(url).into_owned(),
            message,
        };
        let pace = Pace::from_env().map_err(fail)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fail(format!("cannot start the I/O runtime: {e}")))?;
        let env = |k: &str| std::env::var(k).ok();
        let mut local_root = None;
        let (inner, prefix, endpoint, bucket): (Arc<dyn ObjectStore>, String, String, _) =
            if let Some(rest) = url.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(fail("expected `s3://BUCKET/PREFIX`".into()));
                }
                if let Some(m) = missing_credentials(&env) {
                    return Err(fail(m));
                }
                let endpoint = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
                    .iter()
                    .find_map(|k| env(k).filter(|v| !v.is_empty()));
                let shown = endpoint.clone().unwrap_or_else(|| {
                    let region = env("AWS_REGION")
                        .or_else(|| env("AWS_DEFAULT_REGION"))
                        .unwrap_or_else(|| "us-east-1".into());
                    format!("https://s3.{region}.amazonaws.com")
                });
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_http_connector(Sanitizing)
                    .with_retry(object_store::RetryConfig {
                        backoff: object_store::BackoffConfig::default(),
                        max_retries: 2,
                        retry_timeout: pace.request(),
                    })
                    .with_client_options(
                        object_store::ClientOptions::new()
                            .with_connect_timeout(Duration::from_secs(5))
                            // Each read of the socket; the whole request is not timed (a
                            // 1 GiB backup on a slow link must finish): [`Pace`] bounds it.
                            .with_read_timeout(pace.idle)
                            .with_timeout_disabled(),
                    );
                // An endpoint the operator spelled `http://` (a store on the same host or
                // network) is used as spelled: the objects are encrypted either way.
                if endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with("http://"))
                {
                    b = b.with_allow_http(true);
                }
                let s3 = b.build().map_err(|e| fail(e.to_string()))?;
                (
                    Arc::new(s3),
                    prefix.trim_matches('/').to_string(),
                    shown,
                    Some(bucket.to_string()),
                )
            } else if let Some(path) = url.strip_prefix("file://") {
                if !path.starts_with('/') {
                    return Err(fail("expected `file:///ABSOLUTE/PATH`".into()));
                }
                if create {
                    std::fs::create_dir_all(path).map_err(|e| fail(e.to_string()))?;
                }
                let local = object_store::local::LocalFileSystem::new_with_prefix(path)
                    .map_err(|e| fail(e.to_string()))?;
                local_root = Some(std::path::PathBuf::from(path));
                (Arc::new(local), String::new(), url.to_string(), None)
            } else {
                return Err(fail(
                    "expected `s3://BUCKET/PREFIX` or `file:///PATH`".into(),
                ));
            };
        Ok(Store {
            url: url.to_string(),
            endpoint,
            bucket,
            inner,
            prefix: ObjectPath::from(prefix),
            runtime,
            pace,
            local: local_root,
        })
    }

    /// The URL as given.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, name: &str) -> ObjectPath {
        self.prefix.clone().join(name)
    }

    /// A store error on one line (it may quote a key of the bucket), with what to do.
    fn fail(&self, message: impl std::fmt::Display) -> BackupError {
        BackupError::Store {
            url: crate::printable::line(&self.url).into_owned(),
            message: crate::printable::line(&message.to_string()).into_owned(),
        }
    }

    /// An object_store error, explained.
    fn explain(&self, e: &object_store::Error) -> BackupError {
        let text = e.to_string();
        let bucket = self.bucket.as_deref().unwrap_or("");
        let hint = if text.contains("NoSuchBucket") {
            format!(
                "the bucket `{bucket}` does not exist at {}: create it (`aws s3 mb s3://{bucket}` \
                 with the same AWS_ENDPOINT_URL, or the store's console) or correct the URL",
                self.endpoint
            )
        } else if [
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "403 Forbidden",
        ]
        .iter()
        .any(|k| text.contains(k))
        {
            format!(
                "{} refused the credentials: check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY \
                 (AWS_SESSION_TOKEN) and the bucket's policy",
                self.endpoint
            )
        } else if text.contains("error sending request") || text.contains("timed out") {
            format!(
                "{} did not answer: check AWS_ENDPOINT_URL (or AWS_REGION) and the network, or \
                 raise CAPSTAN_BACKUP_TIMEOUT (now {} s) for a slow link",
                self.endpoint,
                self.pace.idle.as_secs()
            )
        } else {
            return self.fail(text);
        };
        self.fail(format!("{hint} ({text})"))
    }

    fn stalled(&self, what: &str, after: Duration) -> BackupError {
        self.fail(format!(
            "{} sent nothing for {} s ({what}): check the endpoint and the network, or raise \
             CAPSTAN_BACKUP_TIMEOUT (seconds) for a slow link",
            self.endpoint,
            after.as_secs()
        ))
    }

    /// One request that is not a stream, within [`Pace::request`].
    fn call<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> Result<T, BackupError> {
        let limit = self.pace.request();
        match self
            .runtime
            .block_on(async { tokio::time::timeout(limit, fut).await })
        {
            Err(_) => Err(self.stalled(what, limit)),
            Ok(Err(e)) => Err(self.explain(&e)),
            Ok(Ok(v)) => Ok(v),
        }
    }

    /// Upload backup `id`: `write` streams the encrypted object into a multipart upload
    /// of `<id>.age` and returns its index, which is written last, so an upload that stops
    /// on the way never lists.
    pub(crate) fn push(
        &self,
        id: &str,
        write: impl FnOnce(&mut Upload<'_>) -> Result<Index, BackupError>,
    ) -> Result<Index, BackupError> {
        let name = format!("{id}.age");
        let path = self.path(&name);
        let upload = self.call("starting the upload", self.inner.put_multipart(&path))?;
        let mut w = Upload {
            store: self,
            upload,
            buf: Vec::with_capacity(PART),
            failure: None,
        };
        let index = match write(&mut w).and_then(|i| w.finish().map(|()| i)) {
            Ok(i) => i,
            Err(e) => {
                let e = w.failure.take().unwrap_or(e);
                let _ = self.runtime.block_on(async {
                    tokio::time::timeout(self.pace.request(), w.upload.abort()).await
                });
                return Err(e);
            }
        };
        let json = serde_json::to_vec_pretty(&index).map_err(|e| self.fail(e))?;
        self.call(
            "writing the index",
            self.inner
                .put(&self.path(&format!("{id}.json")), PutPayload::from(json)),
        )?;
        Ok(index)
    }

    /// The objects directly under the prefix (one level: a nested prefix is left out),
    /// names and sizes; keys that cannot be used are reported and left out.
    pub(crate) fn listing(&self) -> Result<Listing, BackupError> {
        let r = self.call(
            "listing the backups",
            self.inner.list_with_delimiter(Some(&self.prefix)),
        )?;
        let mut sizes = BTreeMap::new();
        let mut skipped = Vec::new();
        for m in r.objects.into_iter().take(MAX_LISTED) {
            let Some(name) = m.location.filename() else {
                continue;
            };
            if name.contains(CONTROL) {
                skipped.push(format!(
                    "{}: a key with control characters (each shown as {CONTROL}), not capstan's",
                    crate::printable::line(name)
                ));
                continue;
            }
            sizes.insert(name.to_string(), m.size);
        }
        Ok(Listing { sizes, skipped })
    }

    /// Every backup that [`accept`] takes, newest first, each index read (and dropped) in
    /// turn and handed to `each`, which returns whether to go on. Returns what was skipped,
    /// and why (escaped).
    pub(crate) fn scan(
        &self,
        now_unix: i64,
        each: &mut dyn FnMut(Index) -> bool,
    ) -> Result<Vec<String>, BackupError> {
        let Listing { sizes, mut skipped } = self.listing()?;
        let mut ids = Vec::new();
        for (name, size) in &sizes {
            if let Some(id) = name.strip_suffix(".json") {
                if is_id(id) {
                    ids.push((id.to_string(), *size));
                } else {
                    skipped.push(format!("{}: not a backup id", crate::printable::line(name)));
                }
            } else if let Some(id) = name.strip_suffix(".age") {
                if !sizes.contains_key(&format!("{id}.json")) {
                    skipped.push(format!(
                        "{}: no index (an upload that did not finish)",
                        crate::printable::line(name)
                    ));
                }
            } else {
                skipped.push(format!(
                    "{}: not a backup object (`<id>.age`, `<id>.json`)",
                    crate::printable::line(name)
                ));
            }
        }
        // Newest first by the id's time; an index's time must be its id's ([`accept`]).
        ids.sort_by(|a, b| b.0.cmp(&a.0));
        for (id, size) in ids {
            let name = format!("{id}.json");
            if size > MAX_INDEX {
                skipped.push(format!("{name}: {size} bytes, not an index"));
                continue;
            }
            let parsed = self.get(&name, MAX_INDEX).and_then(|b| {
                serde_json::from_slice::<Index>(&b).map_err(|e| self.fail(format!("{name}: {e}")))
            });
            let index = match parsed {
                Ok(i) => i,
                Err(BackupError::Store { message, .. }) => {
                    skipped.push(format!("{name}: {message}"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            match accept(&index, &id, sizes.get(&index.object()).copied(), now_unix) {
                Ok(()) => {
                    if !each(index) {
                        break;
                    }
                }
                Err(why) => skipped.push(format!("{name}: {why}")),
            }
        }
        Ok(skipped)
    }

    /// The newest backup ([`Store::scan`]), or the one named `id`, and what was skipped.
    pub(crate) fn choose(
        &self,
        id: Option<&str>,
        now_unix: i64,
    ) -> Result<(Option<Index>, Vec<String>), BackupError> {
        let mut found = None;
        let skipped = self.scan(now_unix, &mut |i| {
            if id.is_none_or(|id| i.id == id) {
                found = Some(i);
                false
            } else {
                true
            }
        })?;
        Ok((found, skipped))
    }

    /// The bytes of object `name` (under the prefix), at most `cap`.
    pub(crate) fn get(&self, name: &str, cap: u64) -> Result<Vec<u8>, BackupError> {
        let mut r = self.reader(name, cap)?;
        let mut out = Vec::with_capacity(r.size.min(cap) as usize);
        match r.read_to_end(&mut out) {
            Ok(_) => Ok(out),
            Err(e) => Err(r.failure.take().unwrap_or_else(|| self.fail(e))),
        }
    }

    /// A reader of object `name` of at most `cap` bytes, streamed under [`Pace`].
    pub(crate) fn reader(&self, name: &str, cap: u64) -> Result<ObjectReader<'_>, BackupError> {
        if let Some(root) = &self.local {
            let p = root.join(name);
            let f = std::fs::File::open(&p)
                .map_err(|e| self.fail(format!("{}: {e}", crate::printable::line(name))))?;
            let size = f.metadata().map_err(|e| self.fail(e))?.len();
            if size > cap {
                return Err(self.fail(format!(
                    "{}: {size} bytes, more than {cap}",
                    crate::printable::line(name)
                )));
            }
            return Ok(ObjectReader {
                store: self,
                name: name.to_string(),
                size,
                stream: futures::stream::empty().boxed(),
                file: Some(std::io::BufReader::with_capacity(256 << 10, f)),
                chunk: bytes::Bytes::new(),
                meter: Meter::new(self.pace, Instant::now()),
                failure: None,
                read: 0,
                done: false,
            });
        }
        let r = self.call("starting a download", self.inner.get(&self.path(name)))?;
        if r.meta.size > cap {
            return Err(self.fail(format!(
                "{}: {} bytes, more than {cap}",
                crate::printable::line(name),
                r.meta.size
            )));
        }
        Ok(ObjectReader {
            store: self,
            name: name.to_string(),
            size: r.meta.size,
            stream: r.into_stream(),
            file: None,
            chunk: bytes::Bytes::new(),
            meter: Meter::new(self.pace, Instant::now()),
            failure: None,
            read: 0,
            done: false,
        })
    }
}

/// A character object_store's path parser refuses, written in its place by [`Sanitizing`].
const CONTROL: char = '\u{fffd}';

/// The names and sizes directly under a prefix, and what was left out.
#[derive(Debug)]
pub(crate) struct Listing {
    /// Object name (no prefix) to size.
    pub sizes: BTreeMap<String, u64>,
    /// What was left out, and why (escaped).
    pub skipped: Vec<String>,
}

/// Whether an index may be listed and chosen: well formed (its fields reach terminals and
/// runbooks), named by its own id (`name_id`), dated by that id (the time in the id is the
/// index's `created`, and the payload's: [`super::open`]), not more than [`SKEW`] seconds
/// in this machine's future (a clock-skewed or forged name cannot outrank every real
/// backup for long), and its object listed with the size it says.
pub(crate) fn accept(
    index: &Index,
    name_id: &str,
    object_size: Option<u64>,
    now_unix: i64,
) -> Result<(), String> {
    if index.format != INDEX_FORMAT
        || index.id != name_id
        || !is_id(&index.id)
        || index.size > super::MAX_OBJECT
        || index.sha256.len() != 64
        || !index.sha256.bytes().all(|c| c.is_ascii_hexdigit())
    {
        return Err("not a capstan backup index".into());
    }
    let Some(t) = super::check::unix_of(&index.created) else {
        return Err("not a capstan backup index (its time)".into());
    };
    if stamp_of(&index.created) != index.id[..16] {
        return Err(format!(
            "its time {} is not its id's: a forged or edited index",
            crate::printable::line(&index.created)
        ));
    }
    if t > now_unix + SKEW {
        return Err(format!(
            "dated {}, more than {} minutes after this machine's clock ({}): a clock-skewed \
             or forged index, not chosen",
            index.created,
            SKEW / 60,
            crate::secrets::pki::format_unix(now_unix)
        ));
    }
    match object_size {
        Some(s) if s == index.size => Ok(()),
        Some(s) => Err(format!(
            "{}: {s} bytes, its index says {}",
            index.object(),
            index.size
        )),
        None => Err(format!("its object {} is missing", index.object())),
    }
}

/// A download, read chunk by chunk under [`Pace`].
pub(crate) struct ObjectReader<'a> {
    store: &'a Store,
    name: String,
    /// The object's size.
    pub size: u64,
    stream: futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    file: Option<std::io::BufReader<std::fs::File>>,
    chunk: bytes::Bytes,
    meter: Meter,
    /// Why the download failed, once it did.
    pub failure: Option<BackupError>,
    /// Bytes read so far.
    pub read: u64,
    /// The stream ended (it is not polled again).
    done: bool,
}

impl ObjectReader<'_> {
    fn failed(&mut self, e: BackupError) -> std::io::Error {
        let io = std::io::Error::other(e.to_string());
        self.failure = Some(e);
        io
    }
}

impl Read for ObjectReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.failure.is_some() {
            return Err(std::io::Error::other("the download failed"));
        }
        if let Some(f) = &mut self.file {
            let n = f.read(buf)?;
            self.read += n as u64;
            return Ok(n);
        }
        while self.chunk.is_empty() {
            if self.done {
                return Ok(0);
            }
            let idle = self.store.pace.idle;
            let next = self
                .store
                .runtime
                .block_on(async { tokio::time::timeout(idle, self.stream.next()).await });
            match next {
                Err(_) => {
                    let e = self
                        .store
                        .stalled(&format!("downloading {}", self.name), idle);
                    return Err(self.failed(e));
                }
                Ok(None) => {
                    self.done = true;
                    return Ok(0);
                }
                Ok(Some(Err(e))) => {
                    let e = self.store.explain(&e);
                    return Err(self.failed(e));
                }
                Ok(Some(Ok(b))) => {
                    if let Err(m) = self.meter.arrived(b.len(), Instant::now()) {
                        let e = self.store.fail(format!(
                            "downloading {} from {}: {m}; check the network, or raise \
                             CAPSTAN_BACKUP_TIMEOUT (seconds) for a slow link",
                            self.name, self.store.endpoint
                        ));
                        return Err(self.failed(e));
                    }
                    self.chunk = b;
                }
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        self.read += n as u64;
        Ok(n)
    }
}

/// An upload: [`PART`]-byte parts, each within [`Pace::part`].
pub(crate) struct Upload<'a> {
    store: &'a Store,
    upload: Box<dyn MultipartUpload>,
    buf: Vec<u8>,
    failure: Option<BackupError>,
}

impl Upload<'_> {
    fn send(&mut self) -> Result<(), BackupError> {
        let part = std::mem::replace(&mut self.buf, Vec::with_capacity(PART));
        let limit = self.store.pace.part(part.len());
        let fut = self.upload.put_part(PutPayload::from(part));
        match self
            .store
            .runtime
            .block_on(async { tokio::time::timeout(limit, fut).await })
        {
            Err(_) => Err(self.store.stalled("uploading a part", limit)),
            Ok(Err(e)) => Err(self.store.explain(&e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    fn finish(&mut self) -> Result<(), BackupError> {
        if !self.buf.is_empty() {
            self.send()?;
        }
        let limit = self.store.pace.request();
        match self
            .store
            .runtime
            .block_on(async { tokio::time::timeout(limit, self.upload.complete()).await })
        {
            Err(_) => Err(self.store.stalled("completing the upload", limit)),
            Ok(Err(e)) => Err(self.store.explain(&e)),
            Ok(Ok(_)) => Ok(()),
        }
    }
}

impl Write for Upload<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.failure.is_some() {
            return Err(std::io::Error::other("the upload failed"));
        }
        let n = buf.len().min(PART - self.buf.len());
        self.buf.extend_from_slice(&buf[..n]);
        if self.buf.len() == PART {
            if let Err(e) = self.send() {
                let io = std::io::Error::other(e.to_string());
                self.failure = Some(e);
                return Err(io);
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// object_store's HTTP client, with every listing page's keys made parseable: a key with
/// an ASCII control character (raw or as an XML character reference) would fail the whole
/// page in object_store's path parser, so the characters are replaced by U+FFFD, which
/// [`Store::listing`] reports and skips.
#[derive(Debug)]
struct Sanitizing;

impl object_store::client::HttpConnector for Sanitizing {
    fn connect(
        &self,
        options: &object_store::ClientOptions,
    ) -> object_store::Result<object_store::client::HttpClient> {
        let inner = object_store::client::ReqwestConnector::default().connect(options)?;
        Ok(object_store::client::HttpClient::new(SanitizingService(
            inner,
        )))
    }
}

#[derive(Debug)]
struct SanitizingService(object_store::client::HttpClient);

/// The largest listing page read (S3 sends at most 1,000 keys a page).
const MAX_PAGE: usize = 16 << 20;

#[async_trait::async_trait]
impl object_store::client::HttpService for SanitizingService {
    async fn call(
        &self,
        req: object_store::client::HttpRequest,
    ) -> Result<object_store::client::HttpResponse, object_store::client::HttpError> {
        let listing = req.method().as_str() == "GET"
            && req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "list-type=2"));
        let resp = self.0.execute(req).await?;
        if !listing {
            return Ok(resp);
        }
        let (parts, body) = resp.into_parts();
        let mut stream = body.bytes_stream();
        let mut page = Vec::new();
        while let Some(b) = stream.next().await {
            let b = b?;
            if page.len() + b.len() > MAX_PAGE {
                return Err(object_store::client::HttpError::new(
                    object_store::client::HttpErrorKind::Decode,
                    std::io::Error::other(format!("a listing page of more than {MAX_PAGE} bytes")),
                ));
            }
            page.extend_from_slice(&b);
        }
        let clean = sanitize_keys(&page);
        Ok(object_store::client::HttpResponse::from_parts(
            parts,
            object_store::client::HttpResponseBody::from(clean),
        ))
    }
}

/// The XML of a listing page with every ASCII control character, raw or as a character
/// reference (`&#1;`, `&#x1F;`), inside `<Key>` and `<Prefix>` replaced by U+FFFD.
pub(crate) fn sanitize_keys(xml: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(xml.len());
    let mut i = 0;
    let mut inside = false;
    while i < xml.len() {
        let rest = &xml[i..];
        if !inside {
            for open in [&b"<Key>"[..], b"<Prefix>"] {
                if rest.starts_with(open) {
                    out.extend_from_slice(open);
                    i += open.len();
                    inside = true;
                    break;
                }
            }
            if inside {
                continue;
            }
            out.push(xml[i]);
            i += 1;
            continue;
        }
        if rest.starts_with(b"</") {
            inside = false;
            out.push(xml[i]);
            i += 1;
            continue;
        }
        let c = xml[i];
        if c < 0x20 || c == 0x7f {
            out.extend_from_slice(CONTROL.to_string().as_bytes());
            i += 1;
            continue;
        }
        if rest.starts_with(b"&#") {
            if let Some(end) = rest.iter().position(|b| *b == b';').filter(|e| *e <= 10) {
                let num = &rest[2..end];
                let v = match num.first() {
                    Some(b'x') | Some(b'X') => std::str::from_utf8(&num[1..])
                        .ok()
                        .and_then(|h| u32::from_str_radix(h, 16).ok()),
                    _ => std::str::from_utf8(num).ok().and_then(|d| d.parse().ok()),
                };
                if v.is_some_and(|v: u32| v < 0x20 || v == 0x7f) {
                    out.extend_from_slice(CONTROL.to_string().as_bytes());
                    i += end + 1;
                    continue;
                }
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trickle_fails_within_a_window_and_a_steady_stream_does_not() {
        let pace = Pace::with_idle(Duration::from_secs(2));
        assert_eq!(pace.window, Duration::from_secs(4));
        let t0 = Instant::now();
        // One byte a second: the first check after the 4 s window fails.
        let mut m = Meter::new(pace, t0);
        let mut failed = None;
        for s in 1..=10u64 {
            if let Err(e) = m.arrived(1, t0 + Duration::from_secs(s)) {
                failed = Some((s, e));
                break;
            }
        }
        let (s, e) = failed.unwrap();
        assert_eq!(s, 4, "{e}");
        assert!(
            e.contains("4 bytes in 4 s, less than 1024 KiB in 4 s"),
            "{e}"
        );
        // 1 MiB a window, for a long time: fine.
        let mut m = Meter::new(pace, t0);
        for s in 1..=100u64 {
            m.arrived(300 << 10, t0 + Duration::from_secs(s)).unwrap();
        }
        // An upload part of 8 MiB gets the idle timeout and 8 windows.
        assert_eq!(pace.part(8 << 20), Duration::from_secs(2 + 32));
        assert_eq!(Pace::default().idle, Duration::from_secs(30));
    }

    fn index(id: &str, created: &str) -> Index {
        Index {
            format: INDEX_FORMAT.into(),
            id: id.into(),
            created: created.into(),
            size: 10,
            sha256: "a".repeat(64),
            files: 1,
            kinds: BTreeMap::new(),
            clusters: vec![],
            recipients: vec![],
            offline_recipients: None,
            objects: None,
        }
    }

    #[test]
    fn the_chooser_refuses_future_dated_misdated_and_misnamed_indexes() {
        let now = super::super::check::unix_of("2026-12-07T04:00:00Z").unwrap();
        let ok = index("20261207T035900Z-0000000a", "2026-12-07T03:59:00Z");
        assert_eq!(accept(&ok, &ok.id, Some(10), now), Ok(()));
        // Within the skew allowance (a clock a few minutes fast): chosen.
        let soon = index("20261207T040400Z-0000000b", "2026-12-07T04:04:00Z");
        assert_eq!(accept(&soon, &soon.id, Some(10), now), Ok(()));
        // Dated next year: skipped, and said why.
        let future = index("20271207T040000Z-0000000c", "2027-12-07T04:00:00Z");
        let e = accept(&future, &future.id, Some(10), now).unwrap_err();
        assert!(
            e.contains("more than 5 minutes after this machine's clock"),
            "{e}"
        );
        // A newer-looking id whose time is old (or the other way round): forged.
        let misdated = index("20991231T235959Z-0000000d", "2026-12-07T03:00:00Z");
        let e = accept(&misdated, &misdated.id, Some(10), now).unwrap_err();
        assert!(e.contains("is not its id's"), "{e}");
        // Under another name, or its object missing or of another size.
        assert!(accept(&ok, "20261207T035900Z-0000000f", Some(10), now).is_err());
        assert!(accept(&ok, &ok.id, None, now)
            .unwrap_err()
            .contains("missing"));
        assert!(accept(&ok, &ok.id, Some(9), now)
            .unwrap_err()
            .contains("its index says 10"));
    }

    #[test]
    fn listing_keys_with_control_characters_are_made_parseable() {
        let xml = b"<ListBucketResult><Contents><Key>mgmt/a\x01b.json</Key></Contents>\n\
            <Contents><Key>mgmt/c&#x1b;[31m.json</Key></Contents><Contents><Key>mgmt/ok&amp;.json</Key>\
            </Contents><CommonPrefixes><Prefix>mgmt/\x07old/</Prefix></CommonPrefixes></ListBucketResult>";
        let out = String::from_utf8(sanitize_keys(xml)).unwrap();
        assert!(out.contains("<Key>mgmt/a\u{fffd}b.json</Key>"), "{out}");
        assert!(out.contains("<Key>mgmt/c\u{fffd}[31m.json</Key>"), "{out}");
        assert!(out.contains("<Key>mgmt/ok&amp;.json</Key>"), "{out}");
        assert!(out.contains("<Prefix>mgmt/\u{fffd}old/</Prefix>"), "{out}");
        // Line breaks between elements stay.
        assert!(out.contains("</Contents>\n<Contents>"), "{out}");
    }

    #[test]
    fn no_credentials_no_request() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let m = missing_credentials(&env(&[])).unwrap();
        assert!(m.contains("AWS_ACCESS_KEY_ID") && m.contains("AWS_EC2_METADATA_DISABLED=false"));
        let m = missing_credentials(&env(&[("AWS_ACCESS_KEY_ID", "x")])).unwrap();
        assert!(m.contains("AWS_SECRET_ACCESS_KEY is not"), "{m}");
        assert!(missing_credentials(&env(&[
            ("AWS_ACCESS_KEY_ID", "x"),
            ("AWS_SECRET_ACCESS_KEY", "y")
        ]))
        .is_none());
        assert!(missing_credentials(&env(&[("AWS_EC2_METADATA_DISABLED", "false")])).is_none());
        assert!(missing_credentials(&env(&[("AWS_EC2_METADATA_DISABLED", "true")])).is_some());
    }
}
