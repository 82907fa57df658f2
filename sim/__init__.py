"""sim: the exact discrete-event simulator that judges every plan.

``simulate(problem, plan, options) -> SimResult`` replays a Plan on the Problem's
hardware. What it executes (the same numbers ``costs.evaluate.plan_cost`` linearises):

* Operator tasks. Op v of microbatch m runs on the replica ``m % replicas`` of its
  stage for ``problem.fwd_time_s[v, q, c]`` (training: also a backward task of
  ``bwd_time_s``). A device runs ``DeviceKind.concurrency`` tasks at a time (1 for every
  preset), in a static order fixed by the schedule (``sim.schedule``): 'stream' and
  '1f1b' interleave microbatches round by round, 'gpipe' runs every forward before any
  backward, 'explicit' follows ``plan.device_order``.
* Casts. When producer and consumer precisions differ, the consumer's device runs a
  cast task before the consumer (inference: ``cast_time_s``). In training
  ``cast_time_s`` counts both directions: half runs before the forward task, half after
  the consumer's backward task (casting the gradient back), on the consumer's device.
* Transfers. A tensor from stage a to stage b > a is relayed hop by hop through the
  devices of stages a+1..b-1; each hop follows ``topology.route``; each link is store
  and forward: serialisation ``bytes / bw`` (the link is busy that long) and the data
  reaches the far end ``latency_s`` later. bytes = edge_elems x bytes_per_elem of the
  producer's precision. Training: the gradient returns over the reverse hops with the
  same bytes; a backward task waits for the gradients of all its consumers. Link
  service follows ``SimOptions.link_model`` (fifo / fair / free).
* Data parallelism (stage with replicas > 1, training): after a replica's last task,
  the stage's replicas all-reduce its gradients (sum over its ops of param_elems x
  bytes_per_elem at the op's precision, / tensor_parallel) as a ring in stage-device
  order: 2(n-1) steps, each sending bytes/n to the next replica over the real links,
  a step leaving a device once the previous step's chunk has arrived there. Reduction
  arithmetic is not timed.
* Tensor parallelism (tensor_parallel t > 1): each op runs on all t devices of the
  replica for time / t; after the forward of every op of kind matmul or head its output
  (act_bytes) is all-reduced among the t devices as a ring (as above); in training the
  input gradient of such an op is all-reduced after its backward the same way. Tensors
  between stages are split evenly over the consumer's t devices (device j receives
  bytes / t from producer device j mod t_producer). Casts and compute split / t.
* Memory (``sim.memory``): static bytes from the start; an op's output from the start
  of its task until it is consumed (inference: every local consumer has finished and
  every outgoing first hop has been serialised -- the part no other op reads, a fused
  op's inner tensors, only while the op runs; training: until the op's backward task
  ends); received, relayed and cast tensors and gradients while they wait. 'stream'
  keeps at most two outputs of an op per device (a task waits for its buffer), more
  only where the static order needs it (an all-reduce between producer and consumer),
  and in realistic runs at most one received copy of each tensor a stage receives or
  relays (flow control: the tensor of the next microbatch leaves its producer once the
  consumer has freed the previous one), two where one would slow the plan below its
  busiest server (``sim.schedule.stream_flow_control``).
  ``peak_own_memory_bytes`` (static + own outputs) never exceeds
  ``costs.evaluate.plan_memory_bytes`` in non-ideal runs (property-tested);
  ``peak_memory_bytes`` adds the in-flight buffers, which that bound leaves out.
* Ideal mode (``SimOptions(ideal=True)``): zero link latency, links serve in the static
  cyclic order, every cross-server dependency advances one round; for tensor_parallel
  = 1 the steady-state period then equals ``plan_cost(problem, plan).period_s`` (tested
  with hypothesis to 1e-9, data-parallel stages included). In training this needs a
  deeper 1F1B window than the standard K - k (more activations held).

Engine: ``sim.execute`` expands the program into nodes and runs them on the replay
kernel ``costs.replay`` (dataflow on static servers + one ``(time, priority, sequence,
node)`` heap for time-ordered links; the analytic iteration runs on it too);
deterministic.
"""
from distplan.sim.options import LINK_MODELS, SimOptions
from distplan.sim.result import SimResult
from distplan.sim.simulate import simulate

__all__ = ["simulate", "SimOptions", "SimResult", "LINK_MODELS"]
