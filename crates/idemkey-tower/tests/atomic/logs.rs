//! The WARN and ERROR events logged on the test's own thread, kept for its assertions.
//!
//! A test that reads them runs on a current-thread runtime, so that every task it spawns
//! (the layer's executions included) logs on that thread.

use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::DefaultGuard;
use tracing::{Event, Level, Metadata, Subscriber};

/// The messages of the WARN and ERROR events logged on this thread while it is alive.
pub(crate) struct Logs {
    events: Arc<Mutex<Vec<(Level, String)>>>,
    _guard: DefaultGuard,
}

impl Logs {
    /// Starts keeping this thread's events.
    pub(crate) fn capture() -> Self {
        let events = Arc::new(Mutex::new(Vec::new()));
        let guard = tracing::subscriber::set_default(Capture(events.clone()));
        Self {
            events,
            _guard: guard,
        }
    }

    /// How many events at `level` said something containing `text`.
    pub(crate) fn count(&self, level: Level, text: &str) -> usize {
        let events = self.events.lock().unwrap();
        let said = |(at, message): &&(Level, String)| *at == level && message.contains(text);
        events.iter().filter(said).count()
    }
}

struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let level = *event.metadata().level();
        // Levels order from ERROR (least) to TRACE.
        if level <= Level::WARN {
            let mut message = Message(String::new());
            event.record(&mut message);
            self.0.lock().unwrap().push((level, message.0));
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// An event's `message` field.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}
