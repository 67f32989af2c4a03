//! The flight recorder's rows: one journal per recorded attempt, its text as exported.
//! Which attempts keep one is the runner's (`journal::RecordPolicy`); this module only
//! reads and writes.

use super::error::Result;
use super::handle::Store;
use crate::sandbox::journal::file::{JournalFile, SealKey};

/// The journals' seal key's name in `jobhost_secrets`.
const SEAL_KEY: &str = "journal-seal";

crate::record! {
    /// A kept journal: `body` is the journal's JSON (empty in a listing).
    #[derive(Debug, Clone, Default, serde::Serialize)]
    pub struct JournalRecord {
        pub run_id: String,
        pub seq: i64,
        pub job: String,
        pub tenant: String,
        pub calls: i64,
        pub bytes: i64,
        /// 1 unless the journal passed its cap (shown as a boolean).
        #[serde(serialize_with = "one_is_true")]
        pub replayable: i64,
        #[serde(skip)]
        pub body: String,
        pub recorded_at: i64,
    }
}

fn one_is_true<S: serde::Serializer>(value: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bool(*value == 1)
}

impl Store {
    /// Keeps an attempt's journal (replacing one its seq had).
    pub async fn put_journal(&self, journal: &JournalFile) -> Result<()> {
        let body = journal.to_json();
        let q = &self.q.put_journal;
        with_pool!(self.pool, p => {
            sqlx::query(q.as_str())
                .bind(&journal.run_id)
                .bind(journal.seq)
                .bind(&journal.job)
                .bind(&journal.tenant)
                .bind(journal.calls.len() as i64)
                .bind(body.len() as i64)
                .bind(i64::from(journal.replayable()))
                .bind(&body)
                .execute(p)
                .await?;
        });
        Ok(())
    }

    /// The journal of attempt `seq` of a run, or (`None`) its last recorded one.
    pub async fn journal(&self, run_id: &str, seq: Option<i64>) -> Result<Option<JournalRecord>> {
        Ok(match seq {
            Some(seq) => with_pool!(self.reader, p => sqlx::query_as(self.q.journal.as_str())
                .bind(run_id)
                .bind(seq)
                .fetch_optional(p)
                .await?),
            None => with_pool!(self.reader, p => sqlx::query_as(self.q.last_journal.as_str())
                .bind(run_id)
                .fetch_optional(p)
                .await?),
        })
    }

    /// The key that seals journals, if a host has made it.
    pub async fn journal_seal_key(&self) -> Result<Option<SealKey>> {
        let q = &self.q.secret;
        let value: Option<String> = with_pool!(self.pool, p => sqlx::query_scalar(q.as_str())
            .bind(SEAL_KEY)
            .fetch_optional(p)
            .await?);
        Ok(value.as_deref().and_then(SealKey::from_hex))
    }

    /// The key that seals journals, made if no host has made it yet: of two hosts making it
    /// at once, the first one written is the one both use.
    pub async fn journal_seal_key_or_make(&self) -> Result<SealKey> {
        if let Some(key) = self.journal_seal_key().await? {
            return Ok(key);
        }
        let made = SealKey::random();
        let q = &self.q.insert_secret;
        with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(SEAL_KEY)
            .bind(made.to_hex())
            .execute(p)
            .await
            .map(drop)?);
        Ok(self.journal_seal_key().await?.unwrap_or(made))
    }

    /// The journals a run keeps, without their text.
    pub async fn run_journals(&self, run_id: &str) -> Result<Vec<JournalRecord>> {
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(self.q.run_journals.as_str())
            .bind(run_id)
            .fetch_all(p)
            .await?),
        )
    }
}
