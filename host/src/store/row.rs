//! Records read from rows by column name on either backend, as `sqlx::FromRow`'s derive
//! would, without its macro crate: that crate compiles both database drivers and SQLite's
//! C library a second time, for the macro (about 40 s of a fresh build's compile time,
//! measured with `cargo build --timings`).

/// Declares a record struct and reads it from a row of either backend: each field from
/// the column of its name. Fields named after `missing_as_default:` may be absent from a
/// row (a statement that does not select them): they take their type's default.
#[macro_export]
macro_rules! record {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$field_meta:meta])* $field_vis:vis $field:ident : $ty:ty ),* $(,)?
        }
        $( missing_as_default: $($optional:ident),+ )?
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $( $(#[$field_meta])* $field_vis $field: $ty, )*
        }

        impl<'r, R: ::sqlx::Row> ::sqlx::FromRow<'r, R> for $name
        where
            &'r str: ::sqlx::ColumnIndex<R>,
            $( $ty: ::sqlx::Decode<'r, R::Database> + ::sqlx::Type<R::Database> + Default, )*
        {
            fn from_row(row: &'r R) -> ::sqlx::Result<Self> {
                const OPTIONAL: &[&str] = &[$($(stringify!($optional)),+)?];
                Ok($name {
                    $( $field: $crate::store::row::column(
                        row,
                        stringify!($field),
                        OPTIONAL.contains(&stringify!($field)),
                    )?, )*
                })
            }
        }
    };
}

/// One column of `row`; if `may_be_missing` and the row has no such column, the default.
pub fn column<'r, R, T>(row: &'r R, name: &'r str, may_be_missing: bool) -> sqlx::Result<T>
where
    R: sqlx::Row,
    &'r str: sqlx::ColumnIndex<R>,
    T: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database> + Default,
{
    match row.try_get(name) {
        Err(sqlx::Error::ColumnNotFound(_)) if may_be_missing => Ok(T::default()),
        read => read,
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Connection;

    crate::record! {
        #[derive(Debug, PartialEq)]
        struct Sample {
            id: String,
            count: i64,
            note: Option<String>,
        }
        missing_as_default: note
    }

    #[tokio::test]
    async fn a_record_reads_its_columns_by_name_and_defaults_only_those_it_may_miss() {
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        let whole: Sample = sqlx::query_as("SELECT 7 AS count, 'a' AS id, 'n' AS note")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            whole,
            Sample {
                id: "a".into(),
                count: 7,
                note: Some("n".into())
            }
        );
        let short: Sample = sqlx::query_as("SELECT 'b' AS id, 1 AS count")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(short.note, None);
        let missing = sqlx::query_as::<_, Sample>("SELECT 'c' AS id")
            .fetch_one(&mut conn)
            .await
            .unwrap_err();
        assert!(matches!(missing, sqlx::Error::ColumnNotFound(c) if c == "count"));
    }
}
