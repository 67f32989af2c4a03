//! Exports `jobhost:job/handler@0.2.0`, which this host does not implement.

wit_bindgen::generate!({ path: "wit", world: "job" });

struct Future;

impl exports::jobhost::job::handler::Guest for Future {
    fn run(payload: String) -> Result<String, String> {
        Ok(payload)
    }
}

export!(Future);
