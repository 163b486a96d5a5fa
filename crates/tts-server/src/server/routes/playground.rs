//! The playground: one page, its script and its style, embedded in the binary (no CDN,
//! works offline).

use axum::http::header;
use axum::response::IntoResponse;

const HTML: &str = include_str!("../playground/index.html");
const JS: &str = include_str!("../playground/playground.js");
const CSS: &str = include_str!("../playground/playground.css");

pub async fn page() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], HTML)
}

pub async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        JS,
    )
}

pub async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS)
}
