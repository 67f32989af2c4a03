//! What a guest statement may be on Postgres, decided on Postgres' own parse tree.
//!
//! The job's role already limits which tables a statement can read or write (Postgres'
//! privileges); what a role cannot be denied is the catalog and the functions every role
//! may call — large objects, `pg_notify` on the hosts' own channel, session advisory
//! locks that outlive the attempt, `set_config`, reading other roles from `pg_roles`. So a
//! statement is parsed with the real Postgres parser (libpg_query) and accepted only if it
//! is one plain data statement (SELECT, INSERT, UPDATE, DELETE, MERGE) whose every node
//! passes: functions from an allow-list of pure ones, no relation (read or written) in a
//! catalog schema or named like the host's, types from an allow-list of built-in scalar
//! ones (no catalog lookup like `'secrets'::regclass`, and no table's row type, whose cast
//! would tell whether a table exists and what its columns are), no `SELECT ... INTO`, no
//! XML. The walk covers every node of the tree (as JSON), so a node
//! kind the checker does not know cannot hide a call.

use super::guest::{GuestDbError, Refusal};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, mpsc};

/// How deep a statement may nest (parentheses, CASE, chains of operators), estimated from
/// its tokens before it is parsed: Postgres' parser and the conversion of its tree recurse
/// once per level, so a 64 KiB chain like `1+1+1+...` would overflow any thread's stack.
/// Deeper statements are refused unparsed (`statement-too-complex`).
const MAX_NESTING: usize = 40;
/// The parser's thread stack: ample for statements within `MAX_NESTING`.
const PARSER_STACK: usize = 16 << 20;
/// Statements up to this length have their verdict remembered (a job runs the same few
/// statements again and again), up to `CACHED` of them.
const CACHEABLE: usize = 2048;
const CACHED: usize = 2048;

type Verdict = Result<(), GuestDbError>;
/// A statement to parse, and where its verdict goes.
type Request = (String, tokio::sync::oneshot::Sender<Verdict>);

/// The one thread that parses guest statements, on a stack of its own: never the async
/// threads', whose stack a sandboxed call shares.
static PARSER: LazyLock<Mutex<mpsc::Sender<Request>>> = LazyLock::new(|| {
    let (send, receive) = mpsc::channel::<Request>();
    std::thread::Builder::new()
        .name("jobhost-sql-parser".into())
        .stack_size(PARSER_STACK)
        .spawn(move || {
            for (sql, reply) in receive {
                // A caller that stopped waiting (its deadline) needs no verdict.
                if !reply.is_closed() {
                    let _ = reply.send(verdict(&sql));
                }
            }
        })
        .expect("start the statement parser");
    Mutex::new(send)
});

static VERDICTS: LazyLock<Mutex<HashMap<String, Verdict>>> = LazyLock::new(Mutex::default);

/// Statements a guest may run; their node names in the parse tree.
const STATEMENTS: [&str; 5] = [
    "SelectStmt",
    "InsertStmt",
    "UpdateStmt",
    "DeleteStmt",
    "MergeStmt",
];

/// Node kinds refused wherever they appear.
const FORBIDDEN_NODES: [&str; 4] = ["XmlExpr", "XmlSerialize", "RangeTableFunc", "IntoClause"];

/// Types a statement may name (in a cast, a column definition list): Postgres' built-in
/// scalar and range types, as the parser spells them (`int` is `int4`, `boolean` is
/// `bool`), and their arrays (`_int4`). Every table also defines a row type of its name,
/// usable without any privilege on the table, and the `reg*` types look names up in the
/// catalog; neither is here.
const ALLOWED_TYPES: &[&str] = &[
    "bool",
    "int2",
    "int4",
    "int8",
    "float4",
    "float8",
    "numeric",
    "money",
    "text",
    "varchar",
    "bpchar",
    "char",
    "name",
    "bytea",
    "bit",
    "varbit",
    "date",
    "time",
    "timetz",
    "timestamp",
    "timestamptz",
    "interval",
    "json",
    "jsonb",
    "jsonpath",
    "uuid",
    "inet",
    "cidr",
    "macaddr",
    "macaddr8",
    "int4range",
    "int8range",
    "numrange",
    "tsrange",
    "tstzrange",
    "daterange",
];

/// Functions a guest may call: pure computations over its own data. Anything else —
/// anything with an effect on the server or a view of it — is refused.
const ALLOWED_FUNCTIONS: &[&str] = &[
    // aggregates and window functions
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "bool_and",
    "bool_or",
    "every",
    "string_agg",
    "array_agg",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "bit_and",
    "bit_or",
    "bit_xor",
    "row_number",
    "rank",
    "dense_rank",
    "percent_rank",
    "cume_dist",
    "ntile",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "nth_value",
    // numbers
    "abs",
    "ceil",
    "ceiling",
    "floor",
    "round",
    "trunc",
    "mod",
    "power",
    "pow",
    "sqrt",
    "cbrt",
    "exp",
    "ln",
    "log",
    "log10",
    "sign",
    "div",
    "gcd",
    "lcm",
    "pi",
    "degrees",
    "radians",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "random",
    "width_bucket",
    "scale",
    // text
    "length",
    "char_length",
    "character_length",
    "octet_length",
    "bit_length",
    "lower",
    "upper",
    "initcap",
    "substr",
    "substring",
    "left",
    "right",
    "position",
    "strpos",
    "replace",
    "translate",
    "trim",
    "btrim",
    "ltrim",
    "rtrim",
    "lpad",
    "rpad",
    "repeat",
    "concat",
    "concat_ws",
    "format",
    "split_part",
    "string_to_array",
    "array_to_string",
    "regexp_replace",
    "regexp_match",
    "regexp_matches",
    "regexp_split_to_array",
    "regexp_split_to_table",
    "regexp_like",
    "regexp_count",
    "starts_with",
    "reverse",
    "md5",
    "sha224",
    "sha256",
    "sha384",
    "sha512",
    "encode",
    "decode",
    "to_hex",
    "ascii",
    "chr",
    "quote_ident",
    "quote_literal",
    "quote_nullable",
    "normalize",
    // time
    "now",
    "clock_timestamp",
    "statement_timestamp",
    "transaction_timestamp",
    "date_trunc",
    "date_part",
    "extract",
    "age",
    "make_date",
    "make_time",
    "make_timestamp",
    "make_timestamptz",
    "make_interval",
    "to_char",
    "to_date",
    "to_timestamp",
    "to_number",
    "justify_days",
    "justify_hours",
    "justify_interval",
    "date_bin",
    "isfinite",
    "timezone",
    // JSON
    "to_json",
    "to_jsonb",
    "json_build_object",
    "jsonb_build_object",
    "json_build_array",
    "jsonb_build_array",
    "json_object",
    "jsonb_object",
    "json_array_length",
    "jsonb_array_length",
    "json_array_elements",
    "jsonb_array_elements",
    "json_array_elements_text",
    "jsonb_array_elements_text",
    "json_each",
    "jsonb_each",
    "json_each_text",
    "jsonb_each_text",
    "json_extract_path",
    "jsonb_extract_path",
    "json_extract_path_text",
    "jsonb_extract_path_text",
    "json_object_keys",
    "jsonb_object_keys",
    "json_typeof",
    "jsonb_typeof",
    "jsonb_set",
    "jsonb_insert",
    "json_strip_nulls",
    "jsonb_strip_nulls",
    "jsonb_pretty",
    "jsonb_path_query",
    "jsonb_path_exists",
    "jsonb_path_match",
    "jsonb_path_query_array",
    "jsonb_path_query_first",
    "row_to_json",
    "json_to_record",
    "jsonb_to_record",
    "json_to_recordset",
    "jsonb_to_recordset",
    // arrays and sets
    "array_length",
    "array_append",
    "array_prepend",
    "array_cat",
    "array_remove",
    "array_replace",
    "array_position",
    "array_positions",
    "cardinality",
    "unnest",
    "array_lower",
    "array_upper",
    "array_ndims",
    "array_dims",
    "generate_series",
    "generate_subscripts",
    // other
    "gen_random_uuid",
    "num_nulls",
    "num_nonnulls",
];

/// Checks one guest statement.
pub async fn check(sql: &str) -> Result<(), GuestDbError> {
    if let Some(known) = VERDICTS.lock().expect("verdicts").get(sql) {
        return *known;
    }
    let (reply, answer) = tokio::sync::oneshot::channel();
    PARSER
        .lock()
        .expect("parser")
        .send((sql.to_string(), reply))
        .map_err(|_| GuestDbError::Unavailable)?;
    let found = answer.await.map_err(|_| GuestDbError::Unavailable)?;
    if sql.len() <= CACHEABLE {
        let mut verdicts = VERDICTS.lock().expect("verdicts");
        if verdicts.len() >= CACHED {
            verdicts.clear();
        }
        verdicts.insert(sql.to_string(), found);
    }
    found
}

/// Estimates how deep `sql` nests from its tokens alone (the scanner does not recurse).
fn nesting(sql: &str) -> Result<usize, GuestDbError> {
    const WORDS: [&str; 10] = [
        "NOT", "IS", "LIKE", "ILIKE", "SIMILAR", "BETWEEN", "IN", "COLLATE", "AT", "::",
    ];
    let scanned =
        pg_query::scan(sql).map_err(|_| GuestDbError::Refused(Refusal::InvalidStatement))?;
    // Operators chained at each open level: a chain nests one level per operator.
    let mut levels: Vec<usize> = vec![0];
    let mut deepest = 0;
    for token in scanned.tokens {
        let text = sql
            .get(token.start.max(0) as usize..token.end.max(0) as usize)
            .unwrap_or("");
        let upper = text.to_ascii_uppercase();
        let operator = WORDS.contains(&upper.as_str())
            || (!upper.is_empty() && upper.chars().all(|c| "+-*/<>=~!@#%^&|`?".contains(c)));
        match upper.as_str() {
            "(" | "[" | "CASE" => levels.push(0),
            ")" | "]" | "END" if levels.len() > 1 => {
                levels.pop();
            }
            "," | ";" | "AND" | "OR" | "WHEN" | "THEN" | "ELSE" => {
                *levels.last_mut().expect("the statement's own level") = 0
            }
            _ if operator => *levels.last_mut().expect("the statement's own level") += 1,
            _ => {}
        }
        deepest = deepest.max(levels.len() + levels.iter().sum::<usize>());
    }
    Ok(deepest)
}

/// The verdict on one statement; runs on the parser's thread.
fn verdict(sql: &str) -> Verdict {
    if nesting(sql)? > MAX_NESTING {
        return Err(GuestDbError::Invalid("statement-too-complex"));
    }
    let parsed =
        pg_query::parse(sql).map_err(|_| GuestDbError::Refused(Refusal::InvalidStatement))?;
    let statements = &parsed.protobuf.stmts;
    if statements.len() != 1 {
        // None (a comment), or several: one statement per call.
        return Err(GuestDbError::Refused(Refusal::Forbidden));
    }
    let tree = serde_json::to_value(&statements[0])
        .map_err(|_| GuestDbError::Refused(Refusal::InvalidStatement))?;
    let kind = tree
        .pointer("/stmt/node")
        .and_then(Value::as_object)
        .and_then(|n| n.keys().next())
        .map(String::as_str);
    if !kind.is_some_and(|k| STATEMENTS.contains(&k)) {
        return Err(GuestDbError::Refused(Refusal::Forbidden));
    }
    walk(&tree)
}

fn walk(value: &Value) -> Result<(), GuestDbError> {
    match value {
        Value::Array(items) => items.iter().try_for_each(walk),
        Value::Object(fields) => {
            // A relation: a `RangeVar`, whether it stands as a node (in a FROM list) or
            // as a typed field (the target of INSERT, UPDATE, DELETE and MERGE).
            if fields.contains_key("relname") {
                check_relation(value)?;
            }
            for (key, inner) in fields {
                match key.as_str() {
                    "FuncCall" => check_function(inner.get("funcname"))?,
                    "TypeName" => check_type(inner.get("names"))?,
                    // A `SELECT ... INTO` carries its target in a field of its own.
                    "into_clause" if !inner.is_null() => {
                        return Err(GuestDbError::Refused(Refusal::Forbidden));
                    }
                    "type_name" if !inner.is_null() => check_type(inner.get("names"))?,
                    k if FORBIDDEN_NODES.contains(&k) => {
                        return Err(GuestDbError::Refused(Refusal::Forbidden));
                    }
                    _ => {}
                }
                walk(inner)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The strings of a list of `String` nodes (a qualified name).
fn names(list: Option<&Value>) -> Vec<&str> {
    list.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|n| n.pointer("/node/String/sval").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

fn check_function(funcname: Option<&Value>) -> Result<(), GuestDbError> {
    let refused = Err(GuestDbError::Refused(Refusal::Forbidden));
    match names(funcname).as_slice() {
        [name] | ["pg_catalog", name] if ALLOWED_FUNCTIONS.contains(name) => Ok(()),
        _ => refused,
    }
}

fn check_relation(range: &Value) -> Result<(), GuestDbError> {
    let schema = range
        .get("schemaname")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = range.get("relname").and_then(Value::as_str).unwrap_or("");
    let hidden = !schema.is_empty() || name.starts_with("pg_") || name.starts_with("jobhost_");
    if hidden {
        // Guests name their granted tables unqualified; anything else is not theirs.
        Err(GuestDbError::Refused(Refusal::NotGranted))
    } else {
        Ok(())
    }
}

fn check_type(names_list: Option<&Value>) -> Result<(), GuestDbError> {
    let allowed = match names(names_list).as_slice() {
        [name] | ["pg_catalog", name] => {
            ALLOWED_TYPES.contains(&name.strip_prefix('_').unwrap_or(name))
        }
        _ => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(GuestDbError::Refused(Refusal::Forbidden))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_data_statements_over_the_guests_tables_pass() {
        for ok in [
            "SELECT 1",
            "select count(*), max(n) from ledger where run_id = $1",
            "-- note\nINSERT INTO ledger VALUES ($1, $2, $3) RETURNING n",
            "/* a /* nested */ b */ update ledger set n = n + 1",
            "(SELECT 1)",
            "WITH x AS (DELETE FROM ledger RETURNING *) SELECT count(*) FROM x",
            "SELECT jsonb_build_object('a', 1)::text, now(), gen_random_uuid()",
            "SELECT n FROM ledger ORDER BY n LIMIT 5 FOR UPDATE",
            "SELECT pg_catalog.lower('X')",
            "SELECT ARRAY[n]::_int8, '{}'::text[], 'r'::char FROM ledger",
            "SELECT * FROM jsonb_to_record('{\"a\":1}') AS r(a int)",
            "SELECT EXTRACT(EPOCH FROM now())",
            "SELECT 1::int, 2::bigint, 'x'::varchar(3), 1.5::decimal, 2::double precision",
            "SELECT now()::timestamp with time zone, '1 day'::interval, DATE '2026-12-02'",
            "SELECT '{1}'::int[], '[1,2)'::int4range, 'true'::boolean, '{}'::jsonb",
            "INSERT INTO ledger SELECT * FROM ledger ON CONFLICT DO NOTHING",
        ] {
            assert_eq!(verdict(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn everything_else_is_refused() {
        let forbidden = Err(GuestDbError::Refused(Refusal::Forbidden));
        let not_granted = Err(GuestDbError::Refused(Refusal::NotGranted));
        for (sql, expected) in [
            ("COMMIT", &forbidden),
            ("/* SELECT */ ROLLBACK", &forbidden),
            ("begin", &forbidden),
            ("SET ROLE postgres", &forbidden),
            ("RESET ROLE", &forbidden),
            ("SET idle_in_transaction_session_timeout = 0", &forbidden),
            ("DROP TABLE ledger", &forbidden),
            ("CREATE TABLE x (a int)", &forbidden),
            ("COPY ledger TO PROGRAM 'x'", &forbidden),
            ("DO $$ BEGIN END $$", &forbidden),
            ("CALL p()", &forbidden),
            ("LOCK TABLE ledger", &forbidden),
            ("LISTEN jobhost_work", &forbidden),
            ("NOTIFY jobhost_work", &forbidden),
            ("PREPARE p AS SELECT 1", &forbidden),
            ("DECLARE c CURSOR FOR SELECT 1", &forbidden),
            ("EXPLAIN ANALYZE SELECT 1", &forbidden),
            ("SELECT 1; SELECT 2", &forbidden),
            ("", &forbidden),
            ("-- only a comment", &forbidden),
            ("SELECT lo_from_bytea(0, 'x')", &forbidden),
            ("SELECT pg_notify('jobhost_work', 'x')", &forbidden),
            ("SELECT pg_advisory_lock(1)", &forbidden),
            (
                "SELECT set_config('idle_in_transaction_session_timeout', '0', false)",
                &forbidden,
            ),
            ("SELECT current_setting('role')", &forbidden),
            ("SELECT pg_read_file('/etc/passwd')", &forbidden),
            (
                "SELECT n FROM ledger WHERE pg_sleep(10) IS NULL",
                &forbidden,
            ),
            (
                "SELECT * FROM ledger, LATERAL dblink('x', 'y') AS t(a int)",
                &forbidden,
            ),
            ("SELECT 'secrets'::regclass", &forbidden),
            ("SELECT CAST('postgres' AS pg_catalog.regrole)", &forbidden),
            (
                "SELECT ARRAY[n::oid]::_regclass::text FROM ledger",
                &forbidden,
            ),
            ("SELECT '{secrets}'::pg_catalog._regclass", &forbidden),
            ("SELECT CAST(ARRAY[1] AS _regrole)", &forbidden),
            ("SELECT 'r=r/postgres'::aclitem", &forbidden),
            ("SELECT '{}'::_aclitem", &forbidden),
            ("SELECT * INTO TEMP t FROM ledger", &forbidden),
            ("SELECT xmlparse(document '<a/>')", &forbidden),
            ("SELECT public.evil()", &forbidden),
            ("SELECT rolname FROM pg_roles", &not_granted),
            ("SELECT * FROM pg_catalog.pg_authid", &not_granted),
            ("SELECT * FROM information_schema.tables", &not_granted),
            ("SELECT * FROM jobhost_runs", &not_granted),
            ("SELECT * FROM public.secrets", &not_granted),
            // A write's target is a typed field, not a node: checked all the same.
            ("INSERT INTO jobhost_runs (id) VALUES ('x')", &not_granted),
            ("UPDATE public.secrets SET n = 1", &not_granted),
            ("DELETE FROM pg_catalog.pg_largeobject", &not_granted),
            (
                "MERGE INTO pg_class c USING (SELECT 1) s ON true WHEN MATCHED THEN DO NOTHING",
                &not_granted,
            ),
            (
                "WITH x AS (INSERT INTO jobhost_leases DEFAULT VALUES RETURNING 1) SELECT * FROM x",
                &not_granted,
            ),
            // A table's row type says whether it exists, and its columns.
            ("SELECT (NULL::jobhost_guest_roles).*", &forbidden),
            ("SELECT NULL::secrets", &forbidden),
            ("SELECT CAST(NULL AS public.secrets)", &forbidden),
            (
                "SELECT * FROM jsonb_to_record('{}') AS r(a secrets)",
                &forbidden,
            ),
            ("SELECT 1::oid", &forbidden),
            ("SELECT '<a/>'::xml", &forbidden),
            (
                "SELECT * FROM XMLTABLE('/a' PASSING '<a/>' COLUMNS b int)",
                &forbidden,
            ),
            (
                "UPDATE ledger SET n = (SELECT count(*) FROM pg_stat_activity)",
                &not_granted,
            ),
            (
                "INSERT INTO ledger SELECT 1, 2, 3 RETURNING (SELECT lo_import('/x'))",
                &forbidden,
            ),
        ] {
            assert_eq!(&verdict(sql), expected, "{sql}");
        }
        assert_eq!(
            verdict("SELEC 1"),
            Err(GuestDbError::Refused(Refusal::InvalidStatement))
        );
        assert_eq!(
            verdict("SELECT 'a\0b'"),
            Err(GuestDbError::Refused(Refusal::InvalidStatement))
        );
    }

    #[tokio::test]
    async fn statements_nested_too_deep_are_refused_before_the_parser_sees_them() {
        let too_complex = Err(GuestDbError::Invalid("statement-too-complex"));
        for sql in [
            format!("SELECT {}1", "1+".repeat(32_000)),
            format!("SELECT {}1{}", "(".repeat(20_000), ")".repeat(20_000)),
            format!("SELECT {}1{}", "(SELECT ".repeat(5_000), ")".repeat(5_000)),
            format!("SELECT {}1{}", "ARRAY[".repeat(5_000), "]".repeat(5_000)),
            format!("SELECT {}1", "NOT ".repeat(10_000)),
            format!(
                "SELECT {}1{}",
                "CASE WHEN true THEN ".repeat(5_000),
                " END".repeat(5_000)
            ),
        ] {
            assert_eq!(check(&sql).await, too_complex, "{}", &sql[..40]);
        }
        // Long but flat statements are fine.
        let values = vec!["($1, $2, $3)"; 2000].join(", ");
        assert_eq!(
            check(&format!("INSERT INTO ledger VALUES {values}")).await,
            Ok(())
        );
        let sum = vec!["n"; 30].join(" + ");
        assert_eq!(check(&format!("SELECT {sum} FROM ledger")).await, Ok(()));
    }
}
