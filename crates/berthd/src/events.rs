//! Container and sandbox lifecycle events for `GetContainerEvents`.
//!
//! [`EventBus`] fans events out to any number of subscribers through a
//! tokio broadcast channel: publishing never waits for a subscriber, and
//! one that falls behind loses events (and is told so) instead of holding
//! the runtime up. Emissions for one object are serialized and checked
//! against its last event, so per object they are never duplicated nor
//! reordered, whichever of a handler or the exit watcher sees a change
//! first; emissions for different objects never wait for each other (an
//! event's statuses may take a shim call to build). [`ExitWatcher`]
//! notices containers that exit on their own.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};

use berth_shim_api::files::EXIT_FILE;
use cri_api::v1::{ContainerEventResponse, ContainerEventType};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::sync::{broadcast, mpsc};

/// Events a subscriber may fall behind by before it loses some.
const BUFFERED_EVENTS: usize = 1024;

/// Whether `next` may follow `last` for one object: the lifecycle only
/// moves forward, and an object with no history must start with CREATED.
pub fn follows(last: Option<ContainerEventType>, next: ContainerEventType) -> bool {
    use ContainerEventType::*;
    match (last, next) {
        (None, ContainerCreatedEvent) => true,
        (None, _) => false,
        (Some(ContainerDeletedEvent), _) => false,
        (Some(last), next) => rank(next) > rank(last),
    }
}

fn rank(kind: ContainerEventType) -> u8 {
    match kind {
        ContainerEventType::ContainerCreatedEvent => 0,
        ContainerEventType::ContainerStartedEvent => 1,
        ContainerEventType::ContainerStoppedEvent => 2,
        ContainerEventType::ContainerDeletedEvent => 3,
    }
}

/// One object's last event sent; its lock is held while the object's next
/// event is built and sent, which keeps that object's events in order.
type Slot = Arc<tokio::sync::Mutex<Option<ContainerEventType>>>;

/// The lifecycle event stream shared by all subscribers.
pub struct EventBus {
    sender: broadcast::Sender<ContainerEventResponse>,
    /// Per container or sandbox id, until its DELETED event.
    objects: Mutex<HashMap<String, Slot>>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new(BUFFERED_EVENTS)
    }
}

impl EventBus {
    pub fn new(capacity: usize) -> Self {
        let (sender, _) = broadcast::channel(capacity);
        Self {
            sender,
            objects: Mutex::new(HashMap::new()),
        }
    }

    /// The slot of `id`, made empty if it has none.
    fn slot(&self, id: &str) -> Slot {
        lock(&self.objects)
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    /// A new subscriber, which sees every event emitted from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ContainerEventResponse> {
        self.sender.subscribe()
    }

    /// Records where an object already is (on restart), without an event.
    pub async fn seed(&self, id: &str, kind: ContainerEventType) {
        *self.slot(id).lock().await = Some(kind);
    }

    /// The last event emitted for `id`.
    pub async fn last(&self, id: &str) -> Option<ContainerEventType> {
        let slot = lock(&self.objects).get(id).cloned();
        match slot {
            Some(slot) => *slot.lock().await,
            None => None,
        }
    }

    /// Emits `kind` for `id` if it follows the last event of `id`; `build`
    /// makes the event (statuses included) only then. Returns whether it
    /// was emitted. A send with no subscriber is not an error.
    pub async fn emit<F>(&self, id: &str, kind: ContainerEventType, build: F) -> bool
    where
        F: Future<Output = ContainerEventResponse>,
    {
        let slot = self.slot(id);
        let mut last = slot.lock().await;
        // A slot waited on while DELETED forgot the id holds DELETED, and
        // one made after holds nothing: neither lets a late event through.
        if !follows(*last, kind) {
            if last.is_none() {
                // Made by this call for an object that has no events (a
                // late one, after DELETED): not kept.
                let mut objects = lock(&self.objects);
                if objects.get(id).is_some_and(|held| Arc::ptr_eq(held, &slot))
                    && Arc::strong_count(&slot) == 2
                {
                    objects.remove(id);
                }
            }
            return false;
        }
        let event = build.await;
        let _ = self.sender.send(event);
        *last = Some(kind);
        if kind == ContainerEventType::ContainerDeletedEvent {
            let mut objects = lock(&self.objects);
            if objects.get(id).is_some_and(|held| Arc::ptr_eq(held, &slot)) {
                objects.remove(id);
            }
        }
        true
    }
}

/// Watches the shims' exit files with inotify, on a thread of its own,
/// and reports the id of each container whose exit file appears.
pub struct ExitWatcher {
    inotify: Arc<Inotify>,
    watched: Arc<Mutex<HashMap<WatchDescriptor, String>>>,
    exits: mpsc::UnboundedSender<String>,
}

impl ExitWatcher {
    /// Starts the watcher thread; exits arrive on the returned receiver.
    pub fn start() -> std::io::Result<(Self, mpsc::UnboundedReceiver<String>)> {
        let inotify = Arc::new(Inotify::init(InitFlags::IN_CLOEXEC).map_err(std::io::Error::from)?);
        let watched: Arc<Mutex<HashMap<WatchDescriptor, String>>> = Arc::default();
        let (exits, receiver) = mpsc::unbounded_channel();
        {
            let inotify = inotify.clone();
            let watched = watched.clone();
            let exits = exits.clone();
            std::thread::Builder::new()
                .name("exit-watcher".into())
                .spawn(move || watch_loop(&inotify, &watched, &exits))?;
        }
        Ok((
            Self {
                inotify,
                watched,
                exits,
            },
            receiver,
        ))
    }

    /// Watches the shim dir of container `id`. An exit file already there
    /// is reported at once, so an exit racing this call is never lost (it
    /// may be reported twice; the bus drops the repeat).
    pub fn watch(&self, id: &str, shim_dir: &Path) -> std::io::Result<()> {
        let flags = AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CLOSE_WRITE;
        let descriptor = self
            .inotify
            .add_watch(shim_dir, flags)
            .map_err(std::io::Error::from)?;
        lock(&self.watched).insert(descriptor, id.to_string());
        if shim_dir.join(EXIT_FILE).exists() {
            let _ = self.exits.send(id.to_string());
        }
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn watch_loop(
    inotify: &Inotify,
    watched: &Mutex<HashMap<WatchDescriptor, String>>,
    exits: &mpsc::UnboundedSender<String>,
) {
    loop {
        let events = match inotify.read_events() {
            Ok(events) => events,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(err) => {
                tracing::error!(error = %err, "exit watcher stopped; exits are seen on the next status call only");
                return;
            }
        };
        for event in events {
            // The dir went away (container removed): forget it.
            if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                lock(watched).remove(&event.wd);
                continue;
            }
            let is_exit = event.name.as_deref().is_some_and(|name| name == EXIT_FILE);
            if !is_exit {
                continue;
            }
            if let Some(id) = lock(watched).get(&event.wd).cloned() {
                if exits.send(id).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ContainerEventType::*;

    fn event(id: &str, kind: ContainerEventType) -> ContainerEventResponse {
        ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            ..Default::default()
        }
    }

    #[test]
    fn lifecycle_only_moves_forward() {
        assert!(follows(None, ContainerCreatedEvent));
        assert!(!follows(None, ContainerStoppedEvent));
        assert!(follows(Some(ContainerCreatedEvent), ContainerStartedEvent));
        assert!(follows(Some(ContainerCreatedEvent), ContainerStoppedEvent));
        assert!(follows(Some(ContainerCreatedEvent), ContainerDeletedEvent));
        assert!(!follows(Some(ContainerStoppedEvent), ContainerStoppedEvent));
        assert!(!follows(Some(ContainerStoppedEvent), ContainerStartedEvent));
        assert!(!follows(Some(ContainerDeletedEvent), ContainerCreatedEvent));
    }

    #[tokio::test]
    async fn repeats_and_late_events_are_dropped() {
        let bus = EventBus::new(16);
        let mut subscriber = bus.subscribe();
        for kind in [
            ContainerCreatedEvent,
            ContainerStartedEvent,
            ContainerStoppedEvent,
            ContainerStoppedEvent,
            ContainerStartedEvent,
            ContainerDeletedEvent,
            ContainerStoppedEvent,
        ] {
            bus.emit("a", kind, async move { event("a", kind) }).await;
        }
        let mut seen = Vec::new();
        while let Ok(event) = subscriber.try_recv() {
            seen.push(event.container_event_type());
        }
        assert_eq!(
            seen,
            [
                ContainerCreatedEvent,
                ContainerStartedEvent,
                ContainerStoppedEvent,
                ContainerDeletedEvent
            ]
        );
    }

    #[tokio::test]
    async fn one_objects_slow_event_holds_up_its_own_events_only() {
        let bus = Arc::new(EventBus::new(16));
        let mut subscriber = bus.subscribe();
        bus.emit("a", ContainerCreatedEvent, async {
            event("a", ContainerCreatedEvent)
        })
        .await;
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let slow = tokio::spawn({
            let bus = bus.clone();
            async move {
                bus.emit("a", ContainerStartedEvent, async move {
                    let _ = released.await;
                    event("a", ContainerStartedEvent)
                })
                .await
            }
        });
        tokio::task::yield_now().await;
        // "a" builds its STARTED: its STOPPED waits behind it, "b" does not.
        let stopped = tokio::spawn({
            let bus = bus.clone();
            async move {
                bus.emit("a", ContainerStoppedEvent, async {
                    event("a", ContainerStoppedEvent)
                })
                .await
            }
        });
        let other = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            bus.emit("b", ContainerCreatedEvent, async {
                event("b", ContainerCreatedEvent)
            }),
        )
        .await;
        assert_eq!(other, Ok(true), "b waited for a");
        assert!(!stopped.is_finished());
        release.send(()).unwrap();
        assert!(slow.await.unwrap());
        assert!(stopped.await.unwrap());
        let mut seen = Vec::new();
        while let Ok(event) = subscriber.try_recv() {
            seen.push((event.container_id.clone(), event.container_event_type()));
        }
        assert_eq!(
            seen,
            [
                ("a".to_string(), ContainerCreatedEvent),
                ("b".to_string(), ContainerCreatedEvent),
                ("a".to_string(), ContainerStartedEvent),
                ("a".to_string(), ContainerStoppedEvent),
            ]
        );
    }

    #[tokio::test]
    async fn deleted_and_late_events_leave_nothing_behind() {
        let bus = EventBus::new(16);
        for kind in [ContainerCreatedEvent, ContainerDeletedEvent] {
            bus.emit("a", kind, async move { event("a", kind) }).await;
        }
        assert!(
            !bus.emit("a", ContainerStoppedEvent, async {
                event("a", ContainerStoppedEvent)
            })
            .await
        );
        assert_eq!(bus.last("a").await, None);
        assert!(lock(&bus.objects).is_empty());
    }

    #[tokio::test]
    async fn a_lagging_subscriber_never_blocks_emission() {
        let bus = EventBus::new(2);
        let mut slow = bus.subscribe();
        for n in 0..10 {
            let id = format!("c{n}");
            let sent = bus
                .emit(&id, ContainerCreatedEvent, async {
                    event(&id, ContainerCreatedEvent)
                })
                .await;
            assert!(sent);
        }
        assert!(matches!(
            slow.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(8))
        ));
    }

    #[tokio::test]
    async fn watcher_reports_an_exit_file_renamed_into_place() {
        let dir = tempfile::tempdir().unwrap();
        let (watcher, mut exits) = ExitWatcher::start().unwrap();
        watcher.watch("c1", dir.path()).unwrap();
        std::fs::write(dir.path().join("other"), b"x").unwrap();
        std::fs::write(dir.path().join(".exit.tmp"), b"{}").unwrap();
        std::fs::rename(dir.path().join(".exit.tmp"), dir.path().join("exit")).unwrap();
        assert_eq!(exits.recv().await.as_deref(), Some("c1"));

        // Already exited when watched: reported at once.
        let done = tempfile::tempdir().unwrap();
        std::fs::write(done.path().join("exit"), b"{}").unwrap();
        watcher.watch("c2", done.path()).unwrap();
        assert_eq!(exits.recv().await.as_deref(), Some("c2"));
    }
}
