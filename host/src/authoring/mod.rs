//! What a job's author uses: the languages jobs are written in and `host new`, `host
//! inspect`'s reading of a component, and `host test`'s cases.

pub mod inspect;
pub mod languages;
pub mod test_cases;
