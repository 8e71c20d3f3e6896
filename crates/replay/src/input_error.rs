//! The one error type of every JSON input the replay reads (traces, tool calls): which file,
//! and where in it.

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{file}: {error}")]
    Io { file: String, error: std::io::Error },
    #[error("{file}: not valid JSON: {message}")]
    Json { file: String, message: String },
    /// A JSON value that is not what the format says: `at` is a path like
    /// `samples[17].mem_usage`.
    #[error("{file}: {at}: {problem}")]
    Invalid { file: String, at: String, problem: String },
}

impl InputError {
    /// Where in the file the problem is, for `Invalid`.
    pub fn at(&self) -> Option<&str> {
        match self {
            InputError::Invalid { at, .. } => Some(at),
            _ => None,
        }
    }
}
