# ruff: noqa: E501  (a data table: one property a line)
"""librdkafka's configuration properties, as librdkafka 2.x's ``rd_kafka_conf_properties_show``
lists them (and the few it accepts without listing): one line each of name, scope (G global,
T topic), who it is for (P producer, C consumer, * both), type, range or values, the property
it is an alias of, and flags (D deprecated, X experimental, H not in the published table).
``config`` validates a ``Producer``'s configuration against it, with librdkafka's
rules and messages.
"""

from __future__ import annotations

from typing import NamedTuple


class Property(NamedTuple):
    name: str
    scope: str
    usage: str
    kind: str  # int, float, bool, enum, str, flags, patlist, ptr (set through a dedicated API)
    values: str  # "lo..hi" for numbers, "a,b,c" for enums, "" otherwise
    alias_of: str
    flags: str


TABLE = """\
builtin.features G * flags - - -
client.id G * str - - -
metadata.broker.list G * str - - -
bootstrap.servers G * str - metadata.broker.list -
message.max.bytes G * int 1000..1000000000 - -
message.copy.max.bytes G * int 0..1000000000 - -
receive.message.max.bytes G * int 1000..2147483647 - -
max.in.flight.requests.per.connection G * int 1..1000000 - -
max.in.flight G * int 1..1000000 max.in.flight.requests.per.connection -
metadata.recovery.strategy G * enum none,rebootstrap - -
metadata.recovery.rebootstrap.trigger.ms G * int 0..2147483647 - -
topic.metadata.refresh.interval.ms G * int -1..3600000 - -
metadata.max.age.ms G * int 1..86400000 - -
topic.metadata.refresh.fast.interval.ms G * int 1..60000 - -
topic.metadata.refresh.fast.cnt G * int 0..1000 - D
topic.metadata.refresh.sparse G * bool - - -
topic.metadata.propagation.max.ms G * int 0..3600000 - -
topic.blacklist G * patlist - - -
debug G * flags - - -
socket.timeout.ms G * int 10..300000 - -
socket.blocking.max.ms G * int 1..60000 - D
socket.send.buffer.bytes G * int 0..100000000 - -
socket.receive.buffer.bytes G * int 0..100000000 - -
socket.keepalive.enable G * bool - - -
socket.nagle.disable G * bool - - -
socket.max.fails G * int 0..1000000 - -
broker.address.ttl G * int 0..86400000 - -
broker.address.family G * enum any,v4,v6 - -
socket.connection.setup.timeout.ms G * int 1000..2147483647 - -
connections.max.idle.ms G * int 0..2147483647 - -
reconnect.backoff.jitter.ms G * int 0..3600000 - D
reconnect.backoff.ms G * int 0..3600000 - -
reconnect.backoff.max.ms G * int 0..3600000 - -
statistics.interval.ms G * int 0..86400000 - -
enabled_events G * int 0..2147483647 - -
error_cb G * ptr - - -
throttle_cb G * ptr - - -
stats_cb G * ptr - - -
log_cb G * ptr - - -
log_level G * int 0..7 - -
log.queue G * bool - - -
log.thread.name G * bool - - -
enable.random.seed G * bool - - -
log.connection.close G * bool - - -
background_event_cb G * ptr - - -
socket_cb G * ptr - - -
connect_cb G * ptr - - -
closesocket_cb G * ptr - - -
open_cb G * ptr - - -
resolve_cb G * ptr - - -
opaque G * ptr - - -
default_topic_conf G * ptr - - -
internal.termination.signal G * int 0..128 - -
api.version.request G * bool - - D
api.version.request.timeout.ms G * int 1..300000 - -
api.version.fallback.ms G * int 0..604800000 - D
broker.version.fallback G * str - - D
allow.auto.create.topics G * bool - - -
security.protocol G * enum plaintext,ssl,sasl_plaintext,sasl_ssl - -
ssl.cipher.suites G * str - - -
ssl.curves.list G * str - - -
ssl.sigalgs.list G * str - - -
ssl.key.location G * str - - -
ssl.key.password G * str - - -
ssl.key.pem G * str - - -
ssl_key G * ptr - - -
ssl.certificate.location G * str - - -
ssl.certificate.pem G * str - - -
ssl_certificate G * ptr - - -
ssl.ca.location G * str - - -
https.ca.location G * str - - -
https.ca.pem G * str - - -
ssl.ca.pem G * str - - -
ssl_ca G * ptr - - -
ssl.ca.certificate.stores G * str - - -
ssl.crl.location G * str - - -
ssl.keystore.location G * str - - -
ssl.keystore.password G * str - - -
ssl.providers G * str - - -
ssl.engine.location G * str - - D
ssl.engine.id G * str - - -
ssl_engine_callback_data G * ptr - - -
enable.ssl.certificate.verification G * bool - - -
ssl.endpoint.identification.algorithm G * enum none,https - -
ssl.certificate.verify_cb G * ptr - - -
sasl.mechanisms G * str - - -
sasl.mechanism G * str - sasl.mechanisms -
sasl.kerberos.service.name G * str - - -
sasl.kerberos.principal G * str - - -
sasl.kerberos.kinit.cmd G * str - - -
sasl.kerberos.keytab G * str - - -
sasl.kerberos.min.time.before.relogin G * int 0..86400000 - -
sasl.username G * str - - -
sasl.password G * str - - -
sasl.oauthbearer.config G * str - - -
enable.sasl.oauthbearer.unsecure.jwt G * bool - - -
oauthbearer_token_refresh_cb G * ptr - - -
sasl.oauthbearer.method G * enum default,oidc - -
sasl.oauthbearer.client.id G * str - - -
sasl.oauthbearer.client.credentials.client.id G * str - sasl.oauthbearer.client.id -
sasl.oauthbearer.client.credentials.client.secret G * str - sasl.oauthbearer.client.secret -
sasl.oauthbearer.client.secret G * str - - -
sasl.oauthbearer.scope G * str - - -
sasl.oauthbearer.extensions G * str - - -
sasl.oauthbearer.token.endpoint.url G * str - - -
sasl.oauthbearer.sub.claim.name G * str - - -
sasl.oauthbearer.grant.type G * enum client_credentials,urn:ietf:params:oauth:grant-type:jwt-bearer - -
sasl.oauthbearer.assertion.algorithm G * enum RS256,ES256 - -
sasl.oauthbearer.assertion.private.key.file G * str - - -
sasl.oauthbearer.assertion.private.key.passphrase G * str - - -
sasl.oauthbearer.assertion.private.key.pem G * str - - -
sasl.oauthbearer.assertion.file G * str - - -
sasl.oauthbearer.assertion.claim.aud G * str - - -
sasl.oauthbearer.assertion.claim.exp.seconds G * int 1..2147483647 - -
sasl.oauthbearer.assertion.claim.iss G * str - - -
sasl.oauthbearer.assertion.claim.jti.include G * bool - - -
sasl.oauthbearer.assertion.claim.nbf.seconds G * int 0..2147483647 - -
sasl.oauthbearer.assertion.claim.sub G * str - - -
sasl.oauthbearer.assertion.jwt.template.file G * str - - -
sasl.oauthbearer.metadata.authentication.type G * enum none,azure_imds,aws_iam - -
plugin.library.paths G * str - - -
interceptors G * ptr - - -
group.id G C str - - -
group.instance.id G C str - - -
partition.assignment.strategy G C str - - -
session.timeout.ms G C int 1..3600000 - -
heartbeat.interval.ms G C int 1..3600000 - -
group.protocol.type G C str - - -
group.protocol G C enum classic,consumer - -
group.remote.assignor G C str - - -
coordinator.query.interval.ms G C int 1..3600000 - -
max.poll.interval.ms G C int 1..86400000 - -
enable.auto.commit G C bool - - -
auto.commit.interval.ms G C int 0..86400000 - -
enable.auto.offset.store G C bool - - -
queued.min.messages G C int 1..10000000 - -
queued.max.messages.kbytes G C int 1..2097151 - -
fetch.wait.max.ms G C int 0..300000 - -
fetch.queue.backoff.ms G C int 0..300000 - -
fetch.message.max.bytes G C int 1..1000000000 - -
max.partition.fetch.bytes G C int 1..1000000000 fetch.message.max.bytes -
fetch.max.bytes G C int 0..2147483135 - -
fetch.min.bytes G C int 0..2147483647 - -
fetch.error.backoff.ms G C int 0..300000 - -
offset.store.method G C enum none,file,broker - D
isolation.level G C enum read_uncommitted,read_committed - -
consume_cb G C ptr - - -
rebalance_cb G C ptr - - -
offset_commit_cb G C ptr - - -
enable.partition.eof G C bool - - -
check.crcs G C bool - - -
client.rack G * str - - -
max.poll.records G C int 1..2147483647 - -
share.acknowledgement.mode G C str - - -
transactional.id G P str - - -
transaction.timeout.ms G P int 1000..2147483647 - -
enable.idempotence G P bool - - -
enable.gapless.guarantee G P bool - - X
queue.buffering.max.messages G P int 0..2147483647 - -
queue.buffering.max.kbytes G P int 1..2147483647 - -
queue.buffering.max.ms G P float 0..900000 - -
linger.ms G P float 0..900000 queue.buffering.max.ms -
message.send.max.retries G P int 0..2147483647 - -
retries G P int 0..2147483647 message.send.max.retries -
retry.backoff.ms G * int 1..300000 - -
retry.backoff.max.ms G * int 1..300000 - -
queue.buffering.backpressure.threshold G P int 1..1000000 - -
compression.codec G P enum none,gzip,snappy,lz4,zstd - -
compression.type G P enum none,gzip,snappy,lz4,zstd compression.codec -
batch.num.messages G P int 1..1000000 - -
batch.size G P int 1..2147483647 - -
delivery.report.only.error G P bool - - -
dr_cb G P ptr - - -
dr_msg_cb G P ptr - - -
sticky.partitioning.linger.ms G P int 0..900000 - -
client.dns.lookup G * enum use_all_dns_ips,resolve_canonical_bootstrap_servers_only - -
enable.metrics.push G * bool - - -
request.required.acks T P int -1..1000 - -
acks T P int -1..1000 request.required.acks -
request.timeout.ms T P int 1..900000 - -
message.timeout.ms T P int 0..2147483647 - -
delivery.timeout.ms T P int 0..2147483647 message.timeout.ms -
queuing.strategy T P enum fifo,lifo - DX
produce.offset.report T P bool - - D
partitioner T P str - - -
partitioner_cb T P ptr - - -
msg_order_cmp T P ptr - - DX
opaque T * ptr - - -
compression.codec T P enum none,gzip,snappy,lz4,zstd,inherit - -
compression.type T P enum none,gzip,snappy,lz4,zstd compression.codec -
compression.level T P int -1..12 - -
auto.commit.enable T C bool - - D
enable.auto.commit T C bool - auto.commit.enable D
auto.commit.interval.ms T C int 10..86400000 - -
auto.offset.reset T C enum smallest,earliest,beginning,largest,latest,end,error - -
offset.store.path T C str - - D
offset.store.sync.interval.ms T C int -1..86400000 - D
offset.store.method T C enum file,broker - D
consume.callback.max.messages T C int 0..1000000 - -
client.software.name G * str - - H
client.software.version G * str - - H
enable.sparse.connections G * bool - - H
enable_sasl_queue G * bool - - H
metadata.request.timeout.ms G * int 10..900000 - HD
test.mock.num.brokers G * int 0..10000 - H
test.mock.broker.rtt G * int 0..3600000 - H
ut_handle_ProduceResponse G * ptr - - H
"""


def _row(line: str) -> Property:
    name, scope, usage, kind, values, alias_of, flags = line.split(" ")
    clean = {"-": ""}
    return Property(name, scope, usage, kind, clean.get(values, values),
                    clean.get(alias_of, alias_of), clean.get(flags, flags))  # fmt: skip


ROWS = [_row(line) for line in TABLE.splitlines() if line]
GLOBAL = {p.name: p for p in ROWS if p.scope == "G"}
TOPIC = {p.name: p for p in ROWS if p.scope == "T"}
