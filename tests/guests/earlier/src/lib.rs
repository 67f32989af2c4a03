//! Built against `jobhost:job@0.1.2` (`wit/`, kept as released): a guest of that version
//! keeps loading and reading on a host of a later 0.1. Its payload names a file
//! (`{"collection": C, "name": N}`); it reads it whole with 0.1.2's `stat` and `read` and
//! logs its size, first byte and digest.

wit_bindgen::generate!({ path: "wit", world: "job" });

use exports::jobhost::job::handler::{Context, Guest, JobError, Outcome};
use jobhost::job::files;
use jobhost::job::log;

struct Earlier;

impl Guest for Earlier {
    fn run(ctx: Context) -> Result<Outcome, JobError> {
        let payload: serde_json::Value = serde_json::from_str(&ctx.payload)
            .map_err(|e| JobError::Unrecoverable(format!("payload: {e}")))?;
        let field = |key: &str| payload[key].as_str().unwrap_or_default().to_string();
        let (collection, name) = (field("collection"), field("name"));
        let failed = |e: jobhost::job::types::HostError| JobError::Failed(format!("{e:?}"));
        let meta = files::stat(&collection, &name)
            .map_err(failed)?
            .ok_or_else(|| JobError::Failed("no such object".into()))?;
        let mut bytes = Vec::new();
        while (bytes.len() as u64) < meta.size {
            let chunk =
                files::read(&collection, &name, bytes.len() as u64, 1 << 20).map_err(failed)?;
            if chunk.is_empty() {
                break;
            }
            bytes.extend_from_slice(&chunk);
        }
        log::write(
            log::Level::Info,
            &format!(
                "read {} bytes, first {:?}, digest {}",
                bytes.len(),
                bytes.first().map(|b| *b as char),
                meta.digest
            ),
        );
        Ok(Outcome::Done)
    }
}

export!(Earlier);
