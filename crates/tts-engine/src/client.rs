//! The engine's side of a request's client: where its events go, whether it is still
//! wanted, and the text it streams in. The engine thread uses the channel implementation;
//! the simulator records events against its simulated clock instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use tokio::sync::mpsc::error::TrySendError;

use crate::request::Event;

/// What happened to an event handed to a client.
#[derive(Debug)]
pub enum SendOutcome {
    Sent,
    /// The client's buffer is full: the event comes back, to be held and retried.
    Full(Event),
    /// The client is gone.
    Closed,
}

/// Streamed text that arrived since the last poll.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextUpdate {
    pub tokens: Vec<u32>,
    /// Characters the tokens came from.
    pub chars: usize,
    /// The text is complete.
    pub ended: bool,
}

/// The engine's handle on one request's client. Never blocks.
pub trait Client {
    fn try_send(&mut self, event: Event) -> SendOutcome;
    /// Whether the client cancelled or went away.
    fn is_cancelled(&self) -> bool;
    /// Streamed text received since the last call (`None` when nothing new).
    fn poll_text(&mut self) -> Option<TextUpdate>;
    /// The engine holds output for this client: it must wake the engine after reading.
    fn wait_for_room(&self);
}

/// A message on a request's text channel.
#[derive(Debug)]
pub(crate) enum TextMsg {
    Tokens { ids: Vec<u32>, chars: usize },
    End,
}

/// Flags shared by a request's handle and the engine.
#[derive(Debug, Default)]
pub(crate) struct RequestShared {
    pub cancelled: AtomicBool,
    /// Set by the engine when it holds output for a full channel; the reader clears it
    /// and wakes the engine.
    pub paused: AtomicBool,
}

/// The real client: a bounded tokio channel for events, a text channel, shared flags.
pub(crate) struct ChannelClient {
    pub events: tokio::sync::mpsc::Sender<Event>,
    pub shared: Arc<RequestShared>,
    pub text: Option<Receiver<TextMsg>>,
}

impl Client for ChannelClient {
    fn try_send(&mut self, event: Event) -> SendOutcome {
        match self.events.try_send(event) {
            Ok(()) => SendOutcome::Sent,
            Err(TrySendError::Full(e)) => SendOutcome::Full(e),
            Err(TrySendError::Closed(_)) => SendOutcome::Closed,
        }
    }

    fn is_cancelled(&self) -> bool {
        self.shared.cancelled.load(Ordering::Acquire) || self.events.is_closed()
    }

    fn poll_text(&mut self) -> Option<TextUpdate> {
        let rx = self.text.as_ref()?;
        let mut update = TextUpdate::default();
        let mut any = false;
        loop {
            match rx.try_recv() {
                Ok(TextMsg::Tokens { ids, chars }) => {
                    update.tokens.extend(ids);
                    update.chars += chars;
                    any = true;
                }
                // A sender dropped without `finish` also ends the text.
                Ok(TextMsg::End) | Err(TryRecvError::Disconnected) => {
                    update.ended = true;
                    self.text = None;
                    return Some(update);
                }
                Err(TryRecvError::Empty) => break,
            }
        }
        any.then_some(update)
    }

    fn wait_for_room(&self) {
        self.shared.paused.store(true, Ordering::Release);
    }
}
