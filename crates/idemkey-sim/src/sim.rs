//! One run: instances of the real layer over one store, clients, a sweeper, then healing.

use std::sync::Arc;
use std::time::Duration;

use idemkey_core::MemoryStore;
use idemkey_tower::{Config, IdempotencyLayer, sweep_all};
use tower::Layer;
use tower::util::BoxCloneSyncService;

use crate::SimConfig;
use crate::bugs::BugStore;
use crate::client::{Instance, Intent, client, send};
use crate::clock::SimClock;
use crate::handler::handle;
use crate::history::History;
use crate::store::SimStore;
use crate::world::{World, ms};

/// Simulates one seed on a fresh paused runtime and returns its history.
pub(crate) fn simulate(seed: u64, config: &SimConfig) -> History {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let history = runtime.block_on(run(seed, config.clone()));
    // Killed executors wait forever; dropping the runtime drops them.
    drop(runtime);
    history
}

async fn run(seed: u64, config: SimConfig) -> History {
    let clock = SimClock::start();
    let world = Arc::new(World::new(seed, config, clock));
    let memory = MemoryStore::with_clock(clock);
    let count = world.config.instances;
    let instances: Arc<[Instance]> = (0..count).map(|i| instance(&world, &memory, i)).collect();
    let sweeper = tokio::spawn(sweeper(world.clone(), store(&world, &memory, count)));
    let mut clients = Vec::new();
    for actor in 0..world.config.actors {
        for _ in 0..world.config.clients_per_actor {
            clients.push(tokio::spawn(client(
                world.clone(),
                instances.clone(),
                actor,
            )));
        }
    }
    // Awaited in spawn order, which the seed does not decide: deterministic.
    for handle in clients {
        let _ = handle.await;
    }
    heal(&world, &instances).await;
    sweeper.abort();
    world.take_history()
}

/// The store as instance `index` sees it: its clock skew matters only to a planted bug.
fn store(world: &Arc<World>, memory: &MemoryStore, index: u8) -> SimStore {
    let lease = i64::try_from(ms(world.config.lease)).unwrap_or(i64::MAX);
    // Fixed, not drawn, so that the seed's draws are the same with and without the bug.
    let skew = match index % 3 {
        0 => 0,
        1 => -lease * 2 / 3,
        _ => lease * 2 / 3,
    };
    let inner = BugStore::new(memory.clone(), world.config.bug, skew);
    SimStore::new(inner, world.clone(), index)
}

fn instance(world: &Arc<World>, memory: &MemoryStore, index: u8) -> Instance {
    let config = Config::default()
        .lease(world.config.lease)
        .retention(world.config.retention);
    let layer = IdempotencyLayer::with_config(store(world, memory, index), config);
    let shared = world.clone();
    let handler = tower::service_fn(move |request| handle(shared.clone(), request));
    BoxCloneSyncService::new(layer.layer(handler))
}

/// Sweeps at seeded times, racing renewals and claims, until the run ends.
async fn sweeper(world: Arc<World>, store: SimStore) {
    loop {
        let wait = world.duration(Duration::from_secs(1), world.config.lease);
        tokio::time::sleep(wait).await;
        let _ = sweep_all(&store).await;
    }
}

/// Stops every fault, lets every lease and pause run out, then retries every key once more:
/// each must now be answered, and none may be in flight.
async fn heal(world: &World, instances: &[Instance]) {
    world.heal();
    let config = &world.config;
    let settle = config.fates.max_pause + config.faults.max_delay * 4 + config.lease * 3;
    tokio::time::sleep(settle).await;
    for actor in 0..config.actors {
        for key in 0..config.keys_per_actor {
            let intent = Intent {
                actor,
                key,
                other_body: false,
            };
            send(world, instances, intent).await;
        }
    }
}
