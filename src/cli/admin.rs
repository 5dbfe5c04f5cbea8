//! Operator actions that change state: `POST /counters/reset` and the token it requires.

use std::path::PathBuf;
use std::sync::Arc;

use crate::service::counters::AdminToken;

/// Admin actions (docs/operations/http-endpoints.md, "/counters/reset").
#[derive(clap::Args)]
pub struct AdminArgs {
    #[arg(long)]
    admin_token_file: Option<PathBuf>,
}

impl AdminArgs {
    /// The token, read from its file; an error names the flag and the file.
    pub fn admin_token(&self) -> Result<Option<Arc<AdminToken>>, String> {
        self.admin_token_file
            .as_ref()
            .map(|path| {
                AdminToken::load(path)
                    .map(Arc::new)
                    .map_err(|error| format!("--admin-token-file {}: {error}", path.display()))
            })
            .transpose()
    }
}
