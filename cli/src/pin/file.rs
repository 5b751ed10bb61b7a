//! The pin file: JSON a person can read, one object.
//!
//! ```json
//! {
//!   "format": "mcp-stdio tool pins v1",
//!   "digest": "sha256",
//!   "covers": ["name", "title", "description", "inputSchema", "outputSchema", "annotations"],
//!   "tools": {
//!     "echo": { "sha256": "<64 hex>", "definition": { "description": "…", "inputSchema": {…}, "name": "echo" } },
//!     "huge": { "sha256": "<64 hex>", "fields_sha256": { "name": "<64 hex>", "description": "<64 hex>" } }
//!   },
//!   "pending": {
//!     "echo":  { "change": "changed", "fields": ["description"], "seen_unix_ms": 1796097132190, "sha256": "…", "definition": {…} },
//!     "extra": { "change": "added", "seen_unix_ms": 1796097132190, "sha256": "…", "definition": {…} },
//!     "gone":  { "change": "removed", "seen_unix_ms": 1796097132190 }
//!   }
//! }
//! ```
//!
//! `tools` are the accepted definitions: each its SHA-256 over the canonical
//! form of the fields in `covers` (see the core's `ToolDefinition`) and
//! that canonical form itself, or, for a definition over
//! `MAX_PINNED_DEFINITION_BYTES`, the digest of each field instead.
//! `pending` holds what guards saw and did not accept, until `mcp-stdio pin
//! accept` moves it into `tools`. A definition that does not match its
//! digest (edited by hand) makes the file unusable, on purpose.
//!
//! Every write replaces the file whole and atomically (a temporary file
//! beside it, fsync, rename, fsync of the folder): a reader sees the old
//! file or the new one, never a part.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use mcp_stdio_core::{
    PinChange, PinChangeKind, PinDigest, PinPolicy, ToolDefinition, ToolDigest, ToolPins,
    MAX_PINNED_DEFINITION_BYTES, MAX_PINNED_TOOLS, PINNED_FIELDS,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;

/// The `format` of a pin file this version reads and writes.
pub(crate) const FORMAT: &str = "mcp-stdio tool pins v1";

/// The `digest` of every pin file: SHA-256.
pub(crate) const DIGEST: &str = "sha256";

/// Bound of a pin file read, in bytes: room for every tool pinned and
/// pending at its largest kept definition (2 × 4096 × (64 KiB + 4 KiB) ≈
/// 544 MiB). A real file is a few KiB per tool.
pub(crate) const MAX_PIN_FILE_BYTES: u64 =
    2 * MAX_PINNED_TOOLS as u64 * (MAX_PINNED_DEFINITION_BYTES as u64 + 4096);

/// The digest of the pins: SHA-256.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

/// A pin file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PinFile {
    pub(crate) format: String,
    pub(crate) digest: String,
    #[serde(default)]
    pub(crate) covers: Vec<String>,
    #[serde(default)]
    pub(crate) tools: BTreeMap<String, ToolEntry>,
    #[serde(default)]
    pub(crate) pending: BTreeMap<String, PendingEntry>,
}

/// An accepted tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolEntry {
    /// SHA-256 of the canonical definition.
    pub(crate) sha256: String,
    /// The canonical definition, when at most `MAX_PINNED_DEFINITION_BYTES`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) definition: Option<Value>,
    /// Each covered field's SHA-256, when the definition is not kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) fields_sha256: BTreeMap<String, String>,
}

/// What a guard saw and did not accept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PendingEntry {
    pub(crate) change: Change,
    /// For `changed`: the fields that differ from the accepted definition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) fields: Vec<String>,
    /// When a guard saw it (its clock), ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) seen_unix_ms: Option<u64>,
    /// The definition seen (`changed`, `added`), as in `tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) definition: Option<Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) fields_sha256: BTreeMap<String, String>,
}

/// The kind of a pending difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Change {
    Changed,
    Added,
    Removed,
}

impl Change {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Changed => "changed",
            Self::Added => "added",
            Self::Removed => "removed",
        }
    }
}

impl ToolEntry {
    /// The entry of a definition the guard gave out.
    pub(crate) fn of(digest: &ToolDigest, definition: Option<&str>) -> Self {
        let definition = definition.and_then(|d| serde_json::from_str::<Value>(d).ok());
        let fields_sha256 = match definition {
            Some(_) => BTreeMap::new(),
            None => digest
                .fields()
                .map(|(f, d)| (f.to_owned(), d.to_string()))
                .collect(),
        };
        Self {
            sha256: digest.whole().to_string(),
            definition,
            fields_sha256,
        }
    }

    /// Its digests, checked: a kept definition must be named `name` and
    /// match its `sha256`.
    pub(crate) fn digest(&self, name: &str) -> Result<ToolDigest, String> {
        tool_digest(
            name,
            &self.sha256,
            self.definition.as_ref(),
            &self.fields_sha256,
        )
    }
}

impl PendingEntry {
    /// The change of a guard's update.
    pub(crate) fn of(change: &PinChange, seen_unix_ms: u64) -> Self {
        let tool = change
            .digest
            .as_ref()
            .map(|d| ToolEntry::of(d, change.definition.as_deref()));
        Self {
            change: match change.kind {
                PinChangeKind::Added => Change::Added,
                PinChangeKind::Removed => Change::Removed,
                // A kind this version does not know: a change to review.
                _ => Change::Changed,
            },
            fields: change.fields.iter().map(|f| (*f).to_owned()).collect(),
            seen_unix_ms: Some(seen_unix_ms),
            sha256: tool.as_ref().map(|t| t.sha256.clone()),
            definition: tool.as_ref().and_then(|t| t.definition.clone()),
            fields_sha256: tool.map(|t| t.fields_sha256).unwrap_or_default(),
        }
    }

    /// The definition seen, as an accepted entry (`changed`, `added`).
    pub(crate) fn tool(&self) -> Option<ToolEntry> {
        Some(ToolEntry {
            sha256: self.sha256.clone()?,
            definition: self.definition.clone(),
            fields_sha256: self.fields_sha256.clone(),
        })
    }
}

fn tool_digest(
    name: &str,
    sha256_hex: &str,
    definition: Option<&Value>,
    fields: &BTreeMap<String, String>,
) -> Result<ToolDigest, String> {
    let whole = PinDigest::from_hex(sha256_hex)
        .ok_or_else(|| format!("tool {name:?}: sha256 is not 64 lowercase hex digits"))?;
    if let Some(definition) = definition {
        let d = ToolDefinition::parse(&definition.to_string(), sha256)
            .map_err(|e| format!("tool {name:?}: its definition: {e}"))?;
        if d.name() != name {
            return Err(format!(
                "tool {name:?}: its definition is named {:?}",
                d.name()
            ));
        }
        if d.digest().whole() != whole {
            return Err(format!(
                "tool {name:?}: its definition does not match its sha256 (edited by hand?); \
                 restore it, or remove the tool from the file to pin what the server lists"
            ));
        }
        return Ok(d.digest().clone());
    }
    if fields.is_empty() {
        return Err(format!(
            "tool {name:?}: neither a definition nor fields_sha256"
        ));
    }
    let mut parsed = Vec::new();
    for (field, hex) in fields {
        let d = PinDigest::from_hex(hex).ok_or_else(|| {
            format!("tool {name:?}: fields_sha256.{field} is not 64 lowercase hex digits")
        })?;
        parsed.push((field.as_str(), d));
    }
    ToolDigest::from_parts(whole, parsed).map_err(|e| format!("tool {name:?}: {e}"))
}

impl PinFile {
    /// An empty pin file.
    pub(crate) fn new() -> Self {
        Self {
            format: FORMAT.to_owned(),
            digest: DIGEST.to_owned(),
            covers: PINNED_FIELDS.iter().map(|f| (*f).to_owned()).collect(),
            tools: BTreeMap::new(),
            pending: BTreeMap::new(),
        }
    }

    /// Reads the pin file at `path`: `None` when there is none.
    pub(crate) fn read(path: &Path) -> Result<Option<Self>, String> {
        let shown = path.display();
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("pin file {shown}: cannot open it: {e}")),
        };
        let mut bytes = Vec::new();
        file.take(MAX_PIN_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("pin file {shown}: cannot read it: {e}"))?;
        if bytes.len() as u64 > MAX_PIN_FILE_BYTES {
            return Err(format!(
                "pin file {shown}: larger than {MAX_PIN_FILE_BYTES} bytes; not a pin file"
            ));
        }
        let file: Self = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "pin file {shown}: cannot be read as a pin file ({e}); fix it, or remove it to \
                 pin what the server lists in the next session"
            )
        })?;
        if file.format != FORMAT || file.digest != DIGEST {
            return Err(format!(
                "pin file {shown}: format {:?} with digest {:?}; this version reads {FORMAT:?} \
                 with {DIGEST:?}",
                file.format, file.digest
            ));
        }
        Ok(Some(file))
    }

    /// The pins a guard starts with, every entry checked.
    pub(crate) fn to_pins(&self, path: &Path, policy: PinPolicy) -> Result<ToolPins, String> {
        let shown = path.display();
        let mut pins = ToolPins::new(sha256);
        pins.policy(policy);
        for (name, entry) in &self.tools {
            let digest = entry
                .digest(name)
                .map_err(|e| format!("pin file {shown}: {e}"))?;
            pins.pin(name, digest)
                .map_err(|e| format!("pin file {shown}: tool {name:?}: {e}"))?;
        }
        for (name, entry) in &self.pending {
            let digest = match (entry.change, entry.tool()) {
                (Change::Removed, _) => None,
                (_, Some(tool)) => Some(
                    tool.digest(name)
                        .map_err(|e| format!("pin file {shown}: pending {e}"))?,
                ),
                (_, None) => {
                    return Err(format!(
                        "pin file {shown}: pending tool {name:?} ({}) has no sha256",
                        entry.change.as_str()
                    ))
                }
            };
            pins.pending(name, digest)
                .map_err(|e| format!("pin file {shown}: pending tool {name:?}: {e}"))?;
        }
        Ok(pins)
    }

    /// Replaces the file at `path` with this one, atomically.
    pub(crate) fn write(&self, path: &Path) -> Result<(), String> {
        let mut bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| format!("pin file {}: cannot encode it: {e}", path.display()))?;
        bytes.push(b'\n');
        write_atomic(path, &bytes)
            .map_err(|e| format!("pin file {}: cannot write it: {e}", path.display()))
    }
}

/// Temporary files made by this process, for unique names.
static TEMP_FILES: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to a new file beside `path`, syncs it, renames it over
/// `path` and syncs the folder: `path` is the old file or the new one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path names no file"))?;
    let temp = folder.join(format!(
        ".{}.{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_FILES.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, path)?;
        // The rename itself reaches the disk with its folder (Unix).
        #[cfg(unix)]
        File::open(folder)?.sync_all()?;
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// A time in ms since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub(crate) fn utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm), for days ≥ 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_796_097_132_190), "2026-12-01 03:52:12 UTC");
    }

    #[test]
    fn a_file_round_trips_and_a_definition_edited_by_hand_is_refused() {
        let dir = mcp_stdio_tests::TempPath::new("pins.json");
        let echo = ToolDefinition::parse(
            r#"{"name":"echo","description":"returns its text","inputSchema":{"type":"object"}}"#,
            sha256,
        )
        .unwrap();
        let mut file = PinFile::new();
        file.tools.insert(
            "echo".into(),
            ToolEntry::of(echo.digest(), Some(echo.canonical())),
        );
        file.tools
            .insert("huge".into(), ToolEntry::of(echo.digest(), None));
        file.write(&dir).unwrap();
        let read = PinFile::read(&dir).unwrap().unwrap();
        assert_eq!(read, file);
        let pins = read.to_pins(&dir, PinPolicy::Hide).unwrap();
        assert_eq!(pins.pinned_count(), 2);
        assert_eq!(read.tools["huge"].digest("huge").unwrap(), *echo.digest());
        let text = std::fs::read_to_string(&dir)
            .unwrap()
            .replace("returns its text", "edited");
        std::fs::write(&dir, text).unwrap();
        let err = PinFile::read(&dir)
            .unwrap()
            .unwrap()
            .to_pins(&dir, PinPolicy::Warn)
            .unwrap_err();
        assert!(err.contains("does not match its sha256"), "{err}");
        std::fs::write(&dir, "{\"tools\": 1").unwrap();
        assert!(PinFile::read(&dir)
            .unwrap_err()
            .contains("cannot be read as a pin file"));
        // No temporary file is left beside it.
        let left: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [std::ffi::OsString::from("pins.json")]);
    }
}
