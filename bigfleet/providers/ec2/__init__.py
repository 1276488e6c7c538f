"""A real cloud provider: one AWS account in one region, driven through boto3 (issue 12).

Quota is shown as speculative machines (design §10): each configured offering (instance type, zone,
on-demand or spot) with a `count` is a pool of slot ids `{name}-{type}-{zone}-{capacity}-NNNNN`;
an instance tagged `bigfleet:machine-id` holds its slot, the lowest free indices are listed as
SPECULATIVE. EC2 is the only state: every state is derived from an instance's EC2 state and its
`bigfleet:*` tags, so a fresh provider object rebuilds the same machines (List is paged
DescribeInstances by the `bigfleet:provider` tag; Get, and the lookup before Configure, Drain and
Delete, is one DescribeInstances by the machine's `bigfleet:machine-id` tag, and lists the
offering only when no instance holds the slot, to answer SPECULATIVE or not found as List
would). What is kept in memory is a cache: fencing epochs (kept for calls that succeed, and
rebuilt from the highest `bigfleet:epoch` tag of a shard's instances that is not beyond the
clock; bigfleet/providers/fencing.py), the throttle counters, offerings out after an
insufficient-capacity answer, blobs on their way, the last refusal of a step EC2 must finish
(below), and launch replies for 2 minutes (DescribeInstances may not list a new instance at once).

- Create: one RunInstances per offering of the batch (MinCount = MaxCount), tagged at launch
  with the provider, shard, epoch and a batch tag (`bigfleet:batch`, also EC2's ClientToken, a
  hash of the idempotency key); then one CreateTags per instance names its machine. A retry finds
  the batch by its tag and names the instances that are still unnamed, launching nothing.
- Configure (design §7 for cloud): the bootstrap blob must become the instance's user data, which
  EC2 only changes on a stopped instance. So: tag `bigfleet:cluster` and `bigfleet:configure =
  stopping`, StopInstances (not needed for an IDLE instance a drain stopped already); once
  stopped (on this call or a later Get/List), ModifyInstanceAttribute UserData, StartInstances,
  tag `configure = starting`. Running again = CONFIGURED. The instance boots again with the new
  user data and its old instance id, and cloud-init runs user data once per instance id: the
  image must run it on every boot (`cloud_final_modules: [[scripts-user, always]]` in its
  cloud.cfg, a `#cloud-boothook` blob, or `cloud-init clean` on shutdown, which alone re-runs a
  `#cloud-config` blob's per-instance modules); otherwise the blob is delivered and never runs
  (docs/providers.md). Limits: EBS-backed instances only; a one-time spot instance (launched
  before spot became persistent) cannot be stopped (EC2 refuses: the configure is refused with
  InvalidTransition, its tags rolled back); the blob waits in memory between the stop and the
  start, so a provider restarted in that window reports the machine FAILED (from CONFIGURING)
  until a configure brings a blob again.
- Steps EC2 must finish (the start of a configure, the stop of a drain) are taken on the
  Configure or Drain call and retried on every later Get/List that finds them due. A step EC2
  refuses (InsufficientInstanceCapacity on the start of an instance whose capacity went
  elsewhere while it was stopped, throttling, anything else) never fails that Get or List, nor
  the call that started the transition: the machine stays CONFIGURING (or DRAINING) with the
  refusal as its `last_error`, the blob stays in memory, and the step is tried again on the next
  Get/List (after the throttle's hint, when throttled; an insufficient-capacity answer also takes
  the offering out, as on RunInstances). A start that never succeeds ends in the transition's
  timeout, which is the workflow's to turn into FAILED.
- Drain: the operator drains the node for the grace; the provider tags `bigfleet:drain-until`
  (now + grace, now if forced) and reports DRAINING until then. When the grace is over (at
  once if forced) it stops the instance: DRAINING while it stops, IDLE once stopped. A drained
  instance must not keep running the old cluster's workloads nor stay joined to it while BigFleet
  counts it IDLE, and the next configure replaces its user data anyway, which needs it stopped:
  so a graceful drain stops it too, once its grace is over (a stopped instance also bills only
  its volumes while it waits). An instance EC2 refuses to stop at all (UnsupportedOperation: a
  legacy one-time spot instance) is reported IDLE still running, its `last_error` saying so:
  delete it rather than configure it.
- Delete: tag `bigfleet:deleting`, cancel the instance's spot request if it has one
  (CancelSpotInstanceRequests: a persistent request would launch a replacement), then
  TerminateInstances (a repeat is harmless; a stopped IDLE instance is terminated as well).
  Terminated and tagged: the slot is SPECULATIVE again. Terminated without the tag (someone
  else): FAILED with `last_error`, until the shard deletes it (the delete tags it if EC2 still
  lets it, and is remembered in memory otherwise).
- Spot: launched through RunInstances as a `persistent` request with interruption behaviour
  `stop`, the only kind EC2 lets BigFleet stop (for Configure and Drain). An interruption stops
  the instance (StateReason `Server.SpotInstanceShutdown`, or it is terminated with
  `Server.SpotInstanceTermination`): FAILED with `last_error` naming the spot interruption, until
  the shard deletes it (EC2 alone may restart an interrupted instance, which it does when
  capacity returns; the delete cancels the request first, so it does not). The request is tagged
  with the provider at launch, so the IAM policy can scope its cancel. moto cannot prove the
  spot part: it accepts the persistent/stop options but ignores them, gives the instance no
  SpotInstanceRequestId, stops spot instances like any other and never interrupts; the tests
  check the request BigFleet sends and inject the rest (a request id, an interruption reason).
- InsufficientInstanceCapacity (and its kin, VcpuLimitExceeded included: an account's vCPU
  quota is spent): the offering is out for `ice_seconds` (Karpenter's 3 minutes), its slots are
  not listed, and the batch raises QuotaExhausted.
- `account_limit`: the account's `max-instances` (DescribeAccountAttributes) caps the provider
  as a whole: the speculative slots listed across all offerings never exceed it minus the
  provider's instances (every offering, stopped ones too: they may start again), shared out
  round-robin in the config's order. Instances outside BigFleet count against the account too
  and are not seen. Most accounts today are limited by vCPU quotas instead (Service Quotas, e.g.
  L-1216C47A "Running On-Demand Standard instances", in vCPUs across the instance families of
  its group); the provider does not read them (servicequotas:GetServiceQuota per quota code, a
  family-to-quota table and the account's other instances; moto does not serve EC2's), so set
  each offering's `count` to what the quota allows. A launch beyond the quota answers
  VcpuLimitExceeded, treated as insufficient capacity.
- Notices (issue 33): with `interruption_queue_url`, a List with `noticed` first reads the SQS
  queue EventBridge puts EC2's warnings in (spot interruption, rebalance recommendation, AWS
  Health scheduled change, state change; notices.py) and tags each of the
  provider's instances it names `bigfleet:notice` (kind, deadline, detail), so every Get and List
  reports it as `Machine.notice`, a fresh provider object too, until the machine is deleted (its
  slot SPECULATIVE again). A stop or termination BigFleet made itself (a configure, a drain, a
  delete) is not a notice, nor is a stop of an instance that runs again. A notice EC2 will not
  take as a tag (a terminated instance) is kept in memory (bounded); an earlier deadline
  replaces a later one, and any deadline a rebalance notice.
  That List reads only the noticed instances and their slots (steps.py `_noticed_listing`),
  not every instance.
- Prices: from the config; spot ones are refreshed from the spot price history every
  `spot_price_seconds` (on List), or when `refresh_spot_prices()` is called.

- RequestLimitExceeded / Throttling: RateLimited with a hint doubling per throttle of that action
  in a row (EC2 keeps a token bucket per action), capped; the SDK's own retries are few.

IAM: exactly the EC2 actions called here: ec2:RunInstances, CreateTags, DeleteTags,
DescribeInstances, StopInstances, StartInstances, ModifyInstanceAttribute, TerminateInstances,
CancelSpotInstanceRequests, DescribeSpotPriceHistory, DescribeAccountAttributes (and
iam:PassRole for an instance profile), the mutating ones scoped to instances tagged
`bigfleet:provider`; with a queue, sqs:ReceiveMessage and sqs:DeleteMessage on it;
examples/ec2-iam-policy.json is that policy (a test keeps its actions equal to the calls made
here and in notices.py).

The modules: config.py (the settings, `load_config`), records.py (an offering's slots, the
instance holding one), api.py (the EC2 calls, their errors, tags and the fencing epochs they
carry), machines.py (instances to records to machine states), steps.py (the steps EC2 must
finish, taken and retried), launch.py (create's RunInstances and naming), notices.py (the SQS
queue of EC2's warnings) and provider.py (`Ec2Provider`, the contract's calls).
"""

from .config import Ec2Config, Ec2Offering, load_config
from .provider import Ec2Provider

__all__ = ["Ec2Config", "Ec2Offering", "Ec2Provider", "load_config"]
