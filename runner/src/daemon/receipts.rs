//! The daemon's receipts (docs/receipts.md): every result is signed by
//! the runner (with `receipts` on, the default), and `GET /v1/receipt-key`
//! answers the public key a client checks them with, `{keyid,
//! public_key_pem}`; 404 `not_found` when receipts are off.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::app::{ApiError, App};
use super::config::Config;
use crate::exec::Runner;

/// The receipt route, to be merged into the main router.
pub fn routes() -> Router<App> {
    Router::new().route("/v1/receipt-key", get(receipt_key))
}

/// Gives `runner` the configured key, unless receipts are off.
pub fn sign_with(runner: &mut Runner, config: &Config) -> Result<(), crate::receipt::KeyError> {
    if !config.receipts {
        return Ok(());
    }
    let signer = crate::exec::attest::signer(&config.data, config.receipt_key.as_deref())?;
    tracing::info!(keyid = %signer.public().keyid, "receipts on");
    runner.set_signer(Some(std::sync::Arc::new(signer)));
    Ok(())
}

async fn receipt_key(State(app): State<App>) -> Response {
    match app.runner.signer() {
        Some(signer) => Json(signer.public().document()).into_response(),
        None => ApiError::ReceiptsOff.into_response(),
    }
}
