@0xc4e1f7a92b3d5e61;
# Scaler wire protocol. Every ZeroMQ message is one encoded `Message` (unpacked
# Cap'n Proto, single segment or more) in frame 0, optionally followed by
# binary frames that some messages refer to by position (see docs/protocol.md).
#
# Compatibility rule: fields are only ever appended (new ordinals); a change
# that breaks old readers bumps the major protocol version.

struct Version {
  major @0 :UInt16;
  minor @1 :UInt16;
}

enum PeerRole {
  client @0;
  worker @1;
  scheduler @2;
  monitor @3;
  workerManager @4;
  objectStorage @5;                       # protocol 1.5 (HelloAck.role of a storage server)
}

struct Capability {
  name @0 :Text;
  value @1 :Int64;
}

struct WorkerInfo {
  slots @0 :UInt32;                       # tasks the worker runs at once
  queueCapacity @1 :UInt32;               # tasks the worker accepts to queue
  capabilities @2 :List(Capability);
  groupId @3 :Data;                       # the worker group a worker manager started it in (1.6); empty: none
  delegationKey @4 :Data;                 # 1.8: the key of the proofs by which the Clients of its tasks show the
                                          # scheduler the task they were made in (Hello.madeInProof); empty: none
  heldTasks @5 :List(HeldTask);           # 1.8, a worker saying Hello again after it lost its scheduler: the tasks
                                          # it holds, and those whose results it holds (docs/protocol.md,
                                          # "Reconnecting")
}

# A task a worker holds when it says Hello again (1.8): the scheduler takes it as assigned to that worker.
struct HeldTask {
  taskId @0 :Data;
  clientId @1 :Data;
  scopeId @2 :Data;                       # as the task came (Task.scopeId)
  attempt @3 :UInt32;                     # as the task came: its result answers this attempt
  waiting @4 :Bool;                       # it waits for tasks it submitted (WaitingTasks)
}

# First message of every peer, to the scheduler and to the object storage server.
struct Hello {
  version @0 :Version;
  role @1 :PeerRole;
  pid @2 :UInt32;
  hostname @3 :Text;
  workerInfo @4 :WorkerInfo;              # role == worker only
  madeIn @5 :Data;                        # 1.8, a client made inside a task: that task's ID; empty: none
  madeInProof @6 :Data;                   # 1.8: HMAC-SHA256, keyed with the delegationKey of the worker running
                                          # madeIn, of the client's ID followed by madeIn (docs/protocol.md)
  reconnectSeconds @7 :Float64;           # 1.8, a client: how long it waits for its scheduler to come back after
                                          # losing the connection, then says Hello again and sends again what has
                                          # not ended; 0: it does not wait (docs/protocol.md, "Reconnecting")
  resuming @8 :Bool;                      # 1.8, a client: this Hello is said again after it lost its scheduler
}

# Answer to an accepted Hello.
struct HelloAck {
  version @0 :Version;
  objectStorageAddress @1 :Text;          # empty when sent by the storage server
  heartbeatIntervalSeconds @2 :Float64;
  timeoutSeconds @3 :Float64;             # the peer is forgotten after this silence
  role @4 :PeerRole;                      # who answered: scheduler or objectStorage (protocol 1.5); an older
                                          # peer leaves it at client (0), which never answers a Hello
  maxMessageSize @5 :UInt64;              # the largest frame it takes (ZMQ_MAXMSGSIZE): a peer that sends a
                                          # larger one is disconnected (1.8); 0: not said (older)
  clientQuota @6 :UInt64;                 # the scheduler: the tasks of its own a client may have queued there;
                                          # the storage server: the bytes of objects one owner may hold (1.8)
}

# Answer to anything the receiver will not serve: wrong protocol version,
# message before Hello, malformed input it could attribute to a sender.
struct Refusal {
  version @0 :Version;                    # the refuser's version
  reason @1 :Text;
}

struct ClientHeartbeat {
  cpu @0 :Float32;
  rssBytes @1 :UInt64;
  pendingTasks @2 :UInt32;
  reportTasks @3 :Bool;                   # 1.8: send me the runs of my tasks (a performance report is open)
  functions @4 :List(Counter);            # 1.8, while the scheduler records (the echo's recordTasks): its tasks
                                          # not done yet, per function (name: module.qualname)
}

struct ClientHeartbeatEcho {
  unused @0 :Void;
  recordTasks @1 :Bool;                   # 1.8: a monitor watches: say your tasks per function (functions)
  taskRuns @2 :TaskRuns;                  # 1.8, to a client that reports: the runs of its tasks, and of the tasks
                                          # of the Clients made in them, that the scheduler heard of since its last
                                          # echo
}

struct WorkerHeartbeat {
  agentCpu @0 :Float32;
  agentRssBytes @1 :UInt64;
  processorCpu @2 :Float32;
  processorRssBytes @3 :UInt64;
  queuedTasks @4 :UInt32;
  runningTasks @5 :UInt32;
  suspendedTasks @6 :UInt32;
  functions @7 :List(FunctionStats);      # since the worker started, per function it ran (protocol 1.2)
  # What the worker holds, for the scheduler to reconcile its view (protocol 1.5):
  lastBatch @8 :UInt64;                   # the sequence of the last TaskBatch received from the scheduler
  heldTasks @9 :UInt32;                   # tasks it holds, in any state (queued, running, storing a result)
  heldDigest @10 :UInt64;                 # the digest of their IDs (docs/protocol.md, "Liveness")
  heldTaskIds @11 :List(Data);            # their IDs: only in the answer to an echo that asks for them
  # While the scheduler records task runs (WorkerHeartbeatEcho.recordTasks, 1.8):
  endedRuns @12 :TaskRuns;                # the runs that ended since the last heartbeat
  currentRuns @13 :TaskRuns;              # the runs going on now (no endedSecondsAgo, no failedRuns)
  memoryLimitBytes @14 :UInt64;           # the worker's memory limit (docs/memory.md); 0: none (1.8)
  memoryKills @15 :UInt64;                # tasks stopped since it started for going past that limit (1.8)
  memoryKilled @16 :List(MemoryKill);     # 1.8: those stopped since the last heartbeat (at most 100)
}

# A task a worker stopped for going over its memory limit (1.8), for the scheduler's events.
struct MemoryKill {
  taskId @0 :Data;
  function @1 :Text;                      # module.qualname
  memoryBytes @2 :UInt64;                 # what its processor (with the processes it started) reached; 0: unknown
  refused @3 :Bool;                       # an allocation past the limit was refused inside the processor (the
                                          # processor went on), rather than the processor stopped
}

# Task runs, for monitors and performance reports (1.8): one entry per run in taskIds and in each column after
# it, in the same order (columns, which cost far less to write and read than a struct per run). The columns of
# numbers are packed arrays in Data, little-endian: 4 bytes a run for a UInt32, 8 for a Float64 (the bytes of a
# List(UInt32) or List(Float64), which a reader then takes whole instead of item by item).
# Times are durations, each measured on one host; the receiver places them on its own clock, from when the
# message that carries them left its sender (docs/monitoring.md, "Clocks").
struct TaskRuns {
  functionNames @0 :List(Text);           # the functions of these runs, each once (module.qualname)
  clientIds @1 :List(Data);               # the clients of these runs, each once
  workerIds @2 :List(Data);               # the workers of these runs, each once; empty from a worker (itself)
  taskIds @3 :List(Data);
  functions @4 :Data;                     # UInt32s: a position in functionNames
  clients @5 :Data;                       # UInt32s: a position in clientIds
  workers @6 :Data;                       # UInt32s: a position in workerIds; empty from a worker
  queuedSeconds @7 :Data;                 # Float64s: from when the scheduler received the task to the run's start
  runSeconds @8 :Data;                    # Float64s: from the run's start to its end (a current run's: to now)
  endedSecondsAgo @9 :Data;               # Float64s: how long before the message left the run ended (ended runs)
  failedRuns @10 :List(UInt32);           # the runs that did not succeed, as positions in taskIds (the others did)
  failedStatuses @11 :List(TaskStatus);   # how each of those ended, in the order of failedRuns
  errorTexts @12 :List(Text);             # the first line of each one's error, in the order of failedRuns
}

# What one worker ran of one function, for monitors.
struct FunctionStats {
  name @0 :Text;                          # module.qualname, as the processor loaded it
  succeeded @1 :UInt64;
  failed @2 :UInt64;                      # raised, could not be run, or its result could not be serialized
  seconds @3 :Float64;                    # total wall time of those runs on the processor
}

struct WorkerHeartbeatEcho {
  unused @0 :Void;
  sendTaskIds @1 :Bool;                   # answer at once with a heartbeat that lists heldTaskIds (1.5)
  recordTasks @2 :Bool;                   # 1.8: someone watches: send your task runs in your heartbeats
}

enum ArgumentKind {
  inline @0;                              # data: serialized value
  object @1;                              # data: object ID in the storage server
  task @2;                                # data: task ID of another task of the same graph; in a TaskBatch
                                          # (1.8): of an earlier task of the same client, whose result it takes
}

struct Argument {
  name @0 :Text;                          # empty for a positional argument
  kind @1 :ArgumentKind;
  data @2 :Data;
}

struct Task {
  taskId @0 :Data;
  clientId @1 :Data;
  functionId @2 :Data;                    # object ID of the serialized function
  arguments @3 :List(Argument);
  priority @4 :Int32;                     # higher runs first
  capabilities @5 :List(Capability);      # required by the task
  attempt @6 :UInt32;                     # set by the scheduler on assignment
  timeoutSeconds @7 :Float64;             # 0: none
  retries @8 :UInt32;
  profiling @9 :Bool;
  serializerId @10 :Data;                 # object ID of the client's serializer; empty: cloudpickle
  storeResult @11 :Bool;                  # put a successful result in object storage whatever its size
                                          # (set by the scheduler on graph nodes that other nodes need)
  streamOutput @12 :Bool;                 # send what the task prints to its client as it prints it (1.3)
  scopeId @13 :Data;                      # 1.8, set by the scheduler: the client whose objects the task reads (for
                                          # a client made inside a task, the client it stands for); empty: clientId
  queuedSeconds @14 :Float64;             # 1.8, scheduler -> worker while it records task runs: how long the
                                          # task waited in the scheduler (the worker adds its own wait)
}

# Client -> scheduler: submit. Scheduler -> worker: assign.
struct TaskBatch {
  tasks @0 :List(Task);
  sequence @1 :UInt64;                    # scheduler -> worker: 1, 2, ... per worker (protocol 1.5); 0 else
}

enum TaskStatus {
  success @0;                             # payload: serialized result
  failed @1;                              # payload: serialized exception, or empty with errorText
  cancelled @2;
  workerDied @3;                          # the processor running it died
  rejected @4;                            # the scheduler will not run it (errorText says why)
  inputsGone @5;                          # 1.8, scheduler -> client: the task names (Argument kind task) a task the
                                          # scheduler does not hold (it ended, or is not the client's): send it
                                          # again with that input's value
}

enum PayloadKind {
  none @0;
  inline @1;
  object @2;                              # payload is an object ID
}

struct Profiling {
  durationSeconds @0 :Float64;
  cpuSeconds @1 :Float64;
  peakMemoryBytes @2 :UInt64;
}

struct TaskResult {
  taskId @0 :Data;
  attempt @1 :UInt32;
  status @2 :TaskStatus;
  payloadKind @3 :PayloadKind;
  payload @4 :Data;
  errorText @5 :Text;                     # human-readable, for failed/workerDied/rejected
  profiling @6 :Profiling;
}

struct TaskResultBatch {
  results @0 :List(TaskResult);
}

struct TaskCancel {
  taskIds @0 :List(Data);
}

struct TaskCancelConfirm {
  taskIds @0 :List(Data);
  cancelled @1 :List(Bool);               # false: already finished or unknown
}

# A graph in one message, or in parts (1.7: more). Tasks refer to each other through Argument.kind == task.
struct GraphTask {
  graphId @0 :Data;
  tasks @1 :List(Task);
  targets @2 :List(Data);                 # task IDs whose results the client wants
  more @3 :Bool;                          # 1.7: further parts of this graph follow, with the same graphId
  again @4 :Bool;                         # 1.8: the first part of a graph sent again after a reconnect: the
                                          # scheduler first drops what it holds of that graph (docs/protocol.md)
}

enum ObjectRequestKind {
  put @0;                                 # frames 1..n hold the payloads of objectIds, in order (frameCounts)
  get @1;
  delete @2;
  clearOwner @3;                          # delete every object of ownerId
  usage @4;                               # 1.8, scheduler -> storage: the bytes each owner of objectIds holds
  admit @5;                               # 1.8, scheduler only: ownerId is a client it serves (scopeId: whose
                                          # objects its tasks read); until the scheduler's clearOwner of ownerId
  summary @6;                             # 1.8, scheduler only: the largest objects (ObjectResponse.summary)
}

struct ObjectRequest {
  requestId @0 :UInt64;
  kind @1 :ObjectRequestKind;
  ownerId @2 :Data;
  objectIds @3 :List(Data);
  frameCounts @4 :List(UInt32);           # put: how many frames make each object, in order; empty: one each
  scopeId @5 :Data;                       # admit (1.8): the client whose objects ownerId's tasks read; empty:
                                          # ownerId itself
}

enum ObjectStatus {
  ok @0;
  notFound @1;
  tooLarge @2;
  storageFull @3;                         # fits in neither the memory nor the spill budget: put it again later
  overQuota @4;                           # 1.8: over its owner's quota (--max-client-memory); older peers get
                                          # storageFull
}

# frames 1..n hold the payloads of the found objects of a get, in order (an object of several frames, see
# frameCounts, is sent only to peers of protocol 1.1 or later).
struct ObjectResponse {
  requestId @0 :UInt64;
  kind @1 :ObjectRequestKind;
  objectIds @2 :List(Data);
  statuses @3 :List(ObjectStatus);
  sizes @4 :List(UInt64);
  reason @5 :Text;
  frameCounts @6 :List(UInt32);           # get: how many frames make each found object, in order; empty: one each
  summary @7 :ObjectSummary;              # 1.8: the answer to a summary request (the scheduler's)
  spilledSizes @8 :List(UInt64);          # 1.8, usage: of sizes[i], the bytes spilled to disk
}

# The largest objects of the storage server (1.8), for monitors (what each owner holds: ClientSnapshot.storedBytes).
struct ObjectSummary {
  largestIds @0 :List(Data);              # the largest objects (at most 20), largest first
  largestOwners @1 :List(Data);           # the owner of each
  largestSizes @2 :List(UInt64);          # the payload bytes of each
  largestSpilled @3 :List(Bool);          # whether each is spilled to disk
  memoryBytes @4 :UInt64;                 # the payload bytes of every object in memory
  spilledBytes @5 :UInt64;                # the payload bytes of every object spilled to disk
}

enum ObjectInstructionKind {
  create @0;
  delete @1;
  clear @2;
}

# Client -> scheduler bookkeeping of its objects; scheduler -> storage clean-up.
struct ObjectInstruction {
  kind @0 :ObjectInstructionKind;
  ownerId @1 :Data;
  objectIds @2 :List(Data);
}

struct DisconnectRequest {
  reason @0 :Text;
}

struct DisconnectResponse {
  unused @0 :Void;
}

struct ClientShutdownRequest {
  unused @0 :Void;
}

struct ClientShutdownResponse {
  accepted @0 :Bool;
  reason @1 :Text;
}

# Scheduler -> worker: give back up to `count` queued (not running) tasks.
struct BalanceRequest {
  count @0 :UInt32;
}

# Worker -> scheduler: the queued tasks it gave back.
struct BalanceResponse {
  taskIds @0 :List(Data);
}

struct WorkerSnapshot {
  workerId @0 :Data;
  heartbeat @1 :WorkerHeartbeat;
  slots @2 :UInt32;
  assignedTasks @3 :UInt32;
  capabilities @4 :List(Capability);
  lastSeenSecondsAgo @5 :Float32;
  groupId @6 :Data;                       # its worker group (WorkerInfo.groupId, 1.6)
  draining @7 :Bool;                      # it takes no new task: its group is being drained (1.6)
}

struct ClientSnapshot {
  clientId @0 :Data;
  heartbeat @1 :ClientHeartbeat;          # its last heartbeat
  tasks @2 :UInt32;                       # its tasks the scheduler holds (queued, assigned, canceling)
  lastSeenSecondsAgo @3 :Float32;
  storedBytes @4 :UInt64;                 # of the objects it owns in the storage server (1.8)
  spilledBytes @5 :UInt64;                # of those, the bytes spilled to disk (1.8)
}

struct Counter {
  name @0 :Text;
  value @1 :UInt64;
}

struct StateSnapshot {
  schedulerCpu @0 :Float32;
  schedulerRssBytes @1 :UInt64;
  taskStates @2 :List(Counter);
  messagesSent @3 :List(Counter);
  messagesReceived @4 :List(Counter);
  workers @5 :List(WorkerSnapshot);
  clients @6 :UInt32;
  objects @7 :UInt64;
  clientSnapshots @8 :List(ClientSnapshot); # one per connected client (protocol 1.2)
  managers @9 :List(ManagerSnapshot);     # one per worker manager, the webhook's included (protocol 1.6)
  clientTaskQuota @10 :UInt64;            # the tasks a client may have queued at the scheduler (1.8)
  clientMemoryQuota @11 :UInt64;          # the bytes of objects an owner may hold in storage (1.8)
  events @12 :List(MonitorEvent);         # 1.8: what happened since the last snapshot, oldest first
  objectSummary @13 :ObjectSummary;       # 1.8: the storage server's largest objects, as last answered
}

# Something that happened at the scheduler (1.8), for monitors: a worker joined, left, died or timed out, a
# task's processor died, a peer was refused, a worker manager was told to start or stop groups.
struct MonitorEvent {
  secondsAgo @0 :Float64;                 # before the snapshot was made
  kind @1 :Text;                          # what happened, in a few words ("worker joined", "refused", ...)
  subject @2 :Data;                       # whom it concerns: a worker, client or manager ID; empty: none
  text @3 :Text;                          # the whole story, for people
}

# A worker manager as the scheduler sees it (1.6), for monitors.
struct ManagerSnapshot {
  managerId @0 :Data;
  heartbeat @1 :WorkerManagerHeartbeat;   # its last
  desiredGroups @2 :UInt32;               # the scheduler's target: groups it should have
  drainingGroups @3 :List(Data);          # its groups the scheduler drains (no new tasks) before it stops them
  lastSeenSecondsAgo @4 :Float32;
}

# Worker manager -> scheduler, every heartbeat interval: what it can start and what it runs.
struct WorkerManagerHeartbeat {
  maxWorkers @0 :UInt32;                  # the most workers it runs: maxGroups x workersPerGroup
  runningWorkers @1 :UInt32;              # workers of its running groups
  workersPerGroup @2 :UInt32;             # protocol 1.6, and every field below
  minGroups @3 :UInt32;                   # groups it keeps however idle
  maxGroups @4 :UInt32;                   # groups it can run at once
  capabilities @5 :List(Capability);      # what the workers of its groups offer
  groups @6 :List(WorkerGroup);           # its groups now, each once
  kind @7 :Text;                          # what runs its groups ("native", "slurm", "webhook"), for people
}

enum WorkerGroupState {
  starting @0;                            # asked for, not running yet (a process starting, a job pending)
  running @1;
  retiring @2;                            # it asks the scheduler to drain it (a time limit near)
  stopping @3;                            # being stopped
}

# A group of workers that a manager starts and stops together (1.6).
struct WorkerGroup {
  groupId @0 :Data;                       # unique in the cluster; its workers say it in WorkerInfo.groupId
  state @1 :WorkerGroupState;
  workers @2 :UInt32;                     # workers it runs when started
  detail @3 :Text;                        # where it runs ("pid 4242", "slurm job 17"), for people
}

enum WorkerManagerCommandKind {
  startWorkers @0;
  stopWorkers @1;
}

enum OutputStream {
  stdout @0;
  stderr @1;
}

# What a task printed (1.3), for a client that asked (Task.streamOutput).
struct TaskOutput {
  taskId @0 :Data;
  clientId @1 :Data;                      # the task's client: the scheduler routes by it
  stream @2 :OutputStream;
  text @3 :Text;
}

# Worker -> scheduler -> client: what tasks printed since the last batch, in the order printed (1.3).
struct TaskOutputBatch {
  outputs @0 :List(TaskOutput);
}

# Scheduler -> worker manager, in answer to each heartbeat (1.6): declarative, so a lost one costs nothing.
struct WorkerManagerCommand {
  kind @0 :WorkerManagerCommandKind;      # kind, count, workerIds: reserved since 1.0, unused; senders leave
  count @1 :UInt32;                       # them at zero
  workerIds @2 :List(Data);
  desiredGroups @3 :UInt32;               # groups it should have starting or running, those being drained
                                          # included, those in stopGroups not (1.6)
  stopGroups @4 :List(Data);              # its groups drained by the scheduler: stop them now (1.6)
}

# Worker -> scheduler: tasks that started or stopped waiting inside the Scaler client for tasks they
# submitted (protocol 1.4). A waiting task holds no room on its worker: the scheduler sends more in its place.
struct WaitingTasks {
  taskIds @0 :List(Data);
  waiting @1 :List(Bool);                 # true: it waits now; false: it runs again
}

# Client -> scheduler (1.8): what the scheduler serves (Client.scheduler_info, Client.dashboard_link). The
# scheduler answers with a SchedulerInfo; a scheduler of 1.7 or before cannot read it (the client does not ask
# one).
struct SchedulerInfoRequest {
  unused @0 :Void;
}

# Scheduler -> client (1.8): the answer to a SchedulerInfoRequest.
struct SchedulerInfo {
  snapshot @0 :StateSnapshot;             # its workers, worker managers and task counts, as monitors see them;
                                          # of the clients, only the one that asked (clientSnapshots)
  monitorAddress @1 :Text;                # where monitors subscribe to its snapshots (scaler_top, scaler_ui)
  dashboardLink @2 :Text;                 # the web monitor's page it was told of (--dashboard-link); empty: none
}

# Client -> scheduler -> every worker (1.8): set up or look at the workers (Client.upload_file, run, restart).
# The scheduler writes the asking client's ID and sends it to each worker of protocol 1.8 it serves (an upload
# also to each worker that joins later, while its client stays); each worker answers a WorkerCallResult, and
# the scheduler answers the client once every worker it sent the call to answered or left.
enum WorkerCallKind {
  run @0;                                 # call a function in the worker's agent
  upload @1;                              # save a file where the worker's processors import from
  restart @2;                             # replace the worker's processor with a fresh one
  logs @3;                                # the worker's recent log lines
}

struct WorkerCall {
  callId @0 :UInt64;                      # the client's: the answer names it
  kind @1 :WorkerCallKind;
  clientId @2 :Data;                      # written by the scheduler: who asked
  name @3 :Text;                          # upload: the file's name (a .py, .zip or .whl, no directory)
  payload @4 :Data;                       # run: the cloudpickled (function, args, kwargs); upload: the file
}

# Worker -> scheduler (1.8): one worker's answer to a WorkerCall.
struct WorkerCallResult {
  callId @0 :UInt64;
  clientId @1 :Data;                      # the call's client: the scheduler routes by it
  workerId @2 :Data;                      # written by the scheduler for the client
  success @3 :Bool;
  payload @4 :Data;                       # run: the cloudpickled value, or exception when it failed; logs: the
                                          # cloudpickled list of (level, line), oldest first
  error @5 :Text;                         # a failure in words (its traceback for run)
}

# Scheduler -> client (1.8): every worker's answer to a WorkerCall of the client.
struct WorkerCallAnswer {
  callId @0 :UInt64;
  results @1 :List(WorkerCallResult);     # one per worker it was sent to; a worker that left says so (error)
}

struct Message {
  union {
    hello @0 :Hello;
    helloAck @1 :HelloAck;
    refusal @2 :Refusal;
    clientHeartbeat @3 :ClientHeartbeat;
    clientHeartbeatEcho @4 :ClientHeartbeatEcho;
    workerHeartbeat @5 :WorkerHeartbeat;
    workerHeartbeatEcho @6 :WorkerHeartbeatEcho;
    taskBatch @7 :TaskBatch;
    taskResultBatch @8 :TaskResultBatch;
    taskCancel @9 :TaskCancel;
    taskCancelConfirm @10 :TaskCancelConfirm;
    graphTask @11 :GraphTask;
    objectRequest @12 :ObjectRequest;
    objectResponse @13 :ObjectResponse;
    objectInstruction @14 :ObjectInstruction;
    disconnectRequest @15 :DisconnectRequest;
    disconnectResponse @16 :DisconnectResponse;
    clientShutdownRequest @17 :ClientShutdownRequest;
    clientShutdownResponse @18 :ClientShutdownResponse;
    balanceRequest @19 :BalanceRequest;
    balanceResponse @20 :BalanceResponse;
    stateSnapshot @21 :StateSnapshot;
    workerManagerHeartbeat @22 :WorkerManagerHeartbeat;
    workerManagerCommand @23 :WorkerManagerCommand;
    taskOutputBatch @24 :TaskOutputBatch;
    waitingTasks @25 :WaitingTasks;
    schedulerInfoRequest @26 :SchedulerInfoRequest;
    schedulerInfo @27 :SchedulerInfo;
    workerCall @28 :WorkerCall;
    workerCallResult @29 :WorkerCallResult;
    workerCallAnswer @30 :WorkerCallAnswer;
  }
}
