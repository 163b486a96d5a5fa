//! The official OpenAI Python SDK streams speech from the server (`tests/openai_sdk.py`).
//! The SDK is installed from PyPI into `target/py-openai` (a venv) when missing; without
//! Python or pip the test prints SKIPPED and why.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const OPENAI_VERSION: &str = "3.57.0";

fn venv_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/py-openai")
}

/// A Python with `openai` importable, installing it when needed; `Err` says why not.
fn python_with_openai() -> Result<PathBuf, String> {
    let venv = venv_dir();
    let python = venv.join("bin/python");
    let has_openai = |py: &Path| {
        Command::new(py)
            .args([
                "-c",
                &format!("import openai, sys; sys.exit(openai.__version__ != '{OPENAI_VERSION}')"),
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if has_openai(&python) {
        return Ok(python);
    }
    let system = ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .ok_or("no python3 on PATH")?;
    if !python.exists() {
        let out = Command::new(system)
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .map_err(|e| format!("python3 -m venv: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "python3 -m venv failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    eprintln!(
        "installing openai=={OPENAI_VERSION} from PyPI into {}",
        venv.display()
    );
    let out = Command::new(&python)
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
        .arg(format!("openai=={OPENAI_VERSION}"))
        .output()
        .map_err(|e| format!("pip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "pip install openai failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if has_openai(&python) {
        Ok(python)
    } else {
        Err("openai is still not importable after pip install".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_sdk_streams_speech_to_a_file() {
    let python = match tokio::task::block_in_place(python_with_openai) {
        Ok(p) => p,
        Err(why) => {
            report_skip(&format!(
                "openai_python_sdk_streams_speech_to_a_file: {why}"
            ));
            return;
        }
    };
    let mut cfg = config();
    cfg.api_keys = vec!["sk-test".into()];
    let t = TestServer::start_unready(cfg).await;
    t.wait_ready_with_key("sk-test").await;
    let out = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_sdk.py");
    let base = t.url("/v1");
    let output = tokio::task::spawn_blocking({
        let out = out.path().to_path_buf();
        move || {
            Command::new(python)
                .arg(script)
                .arg(base)
                .arg("sk-test")
                .arg(out)
                .output()
                .expect("run the SDK script")
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "the SDK script failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.trim_end().ends_with("OK"), "{stdout}");
    assert!(out.path().join("speech.wav").metadata().unwrap().len() > 44);
    t.wait_idle_with_key("sk-test").await;
    t.stop().await;
}
