// The official Apache RocketMQ 5 Java client as a peer of ferrymq's tests and benchmarks.
//
// One sub-command per run; every result is one JSON object per line on standard output (the
// client's own log lines go to standard error):
//
//   produce      --endpoints E --topic T [--count N] [--kind normal|fifo|delay|tx]
//                [--groups G] [--group-prefix P] [--threads K] [--body-prefix B] [--tag X]
//                [--key-prefix K] [--props k=v,k=v] [--delay-ms D]
//                [--tx commit|rollback|orphan] [--check commit|rollback|unknown]
//                [--check-rollback-prefix P,P] [--check-wait S] [--check-count N]
//       sends N messages: message i has body B<i>, key K<i>, message group P<i % G> (fifo: the
//       messages of one group are sent in order, K groups on K threads). Prints one "sent"
//       line per message, then "done". With --tx each message is sent in its own transaction,
//       then committed, rolled back or left open (orphan); the transaction checker prints a
//       "check" line and answers ROLLBACK for bodies starting with a --check-rollback-prefix,
//       --check otherwise; the process waits up to --check-wait seconds for
//       --check-count check-backs before it ends.
//   push         --endpoints E --topic T --group G --count N [--timeout S] [--filter EXPR]
//                [--threads K] [--linger S] [--fail-first N]
//       a push consumer; prints "ready" once started, "msg" per consumed message (in the order
//       the listener saw them), and "done" after N messages (then --linger seconds more, to
//       catch extra deliveries) or the timeout.
//   simple       --endpoints E --topic T --group G --count N [--timeout S] [--batch B]
//                [--invisible S] [--await S] [--filter EXPR]
//       a simple consumer: receive + ack until N messages, "msg" lines with "acked", "done".
//   bench-send   --endpoints E --topic T [--mode sync|async] [--window W] [--size B]
//                [--warmup S] [--warmup-msgs N] [--warmup-max S] [--seconds S]
//   bench-push   --endpoints E --topic T --group G --count N [--warmup-msgs W] [--threads K]
//   bench-simple --endpoints E --topic T --group G --count N [--warmup-msgs W] [--batch B]
//       [--ack each|async]   (async: an ackAsync per received message, then waits for all)
//       throughput: one "bench" line with msgs, seconds, rate (msg/s), cpu_seconds and
//       context_switches (this process, over the measured span) and the warm-up done before
//       it. bench-send warms up with --warmup-msgs async sends (1000 in flight), then (sync)
//       --warmup seconds of sync sends, each until the JIT is quiet (at most --warmup-max
//       seconds each), and measures --seconds. bench-push / bench-simple consume
//       --warmup-msgs + N messages loaded beforehand; the span covers the last N.

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

public final class FerryPeer {
    private static final PrintStream OUT =
            new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    private final Map<String, String> opts = new HashMap<>();

    private FerryPeer(String[] args) {
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("expected --name value, got " + args[i]);
            }
            opts.put(args[i].substring(2), args[++i]);
        }
    }

    public static void main(String[] args) throws Exception {
        // Keep standard output for our JSON lines: anything else printing there goes to stderr.
        System.setOut(System.err);
        if (args.length == 0) {
            throw new IllegalArgumentException("usage: FerryPeer COMMAND --option value ...");
        }
        String[] rest = java.util.Arrays.copyOfRange(args, 1, args.length);
        FerryPeer peer = new FerryPeer(rest);
        switch (args[0]) {
            case "produce" -> peer.produce();
            case "push" -> peer.push();
            case "simple" -> peer.simple();
            case "bench-send" -> peer.benchSend();
            case "bench-push" -> peer.benchPush();
            case "bench-simple" -> peer.benchSimple();
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
        OUT.flush();
        // Client threads (metrics, schedulers) must not keep the JVM alive.
        System.exit(0);
    }

    // -- options ----------------------------------------------------------------------------

    private String str(String name, String dflt) {
        String v = opts.get(name);
        if (v == null && dflt == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return v == null ? dflt : v;
    }

    private String str(String name) {
        return str(name, null);
    }

    private int num(String name, int dflt) {
        return Integer.parseInt(str(name, Integer.toString(dflt)));
    }

    private double secs(String name, double dflt) {
        return Double.parseDouble(str(name, Double.toString(dflt)));
    }

    private ClientConfiguration config() {
        return ClientConfiguration.newBuilder()
                .setEndpoints(str("endpoints"))
                .enableSsl(false)
                .setRequestTimeout(Duration.ofSeconds(10))
                .build();
    }

    private Map<String, FilterExpression> subscription() {
        return Map.of(str("topic"), new FilterExpression(str("filter", "*"), FilterExpressionType.TAG));
    }

    // -- JSON output ------------------------------------------------------------------------

    private static String q(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    private static String list(Iterable<String> items) {
        StringBuilder b = new StringBuilder("[");
        for (String s : items) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append(q(s));
        }
        return b.append(']').toString();
    }

    private static String obj(Map<String, String> m) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, String> e : new java.util.TreeMap<>(m).entrySet()) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append(q(e.getKey())).append(':').append(q(e.getValue()));
        }
        return b.append('}').toString();
    }

    private static synchronized void emit(String event, String fields) {
        OUT.println("{\"event\":" + q(event) + (fields.isEmpty() ? "" : "," + fields) + "}");
    }

    private static String view(MessageView m) {
        ByteBuffer buf = m.getBody().duplicate();
        byte[] body = new byte[buf.remaining()];
        buf.get(body);
        return "\"id\":" + q(m.getMessageId().toString())
                + ",\"topic\":" + q(m.getTopic())
                + ",\"body\":" + q(Base64.getEncoder().encodeToString(body))
                + ",\"tag\":" + q(m.getTag().orElse(null))
                + ",\"keys\":" + list(m.getKeys())
                + ",\"props\":" + obj(m.getProperties())
                + ",\"group\":" + q(m.getMessageGroup().orElse(null))
                + ",\"attempt\":" + m.getDeliveryAttempt()
                + ",\"delivery_ts\":" + m.getDeliveryTimestamp().map(String::valueOf).orElse("null")
                + ",\"born_ts\":" + m.getBornTimestamp()
                + ",\"recv_ms\":" + System.currentTimeMillis();
    }

    private static double cpuSeconds() {
        var os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean sun) {
            return sun.getProcessCpuTime() / 1e9;
        }
        return Double.NaN;
    }

    // -- produce ----------------------------------------------------------------------------

    private Message build(int i, long deliverAt) {
        String kind = str("kind", "normal");
        MessageBuilder b = PROVIDER.newMessageBuilder()
                .setTopic(str("topic"))
                .setBody((str("body-prefix", "m") + i).getBytes(StandardCharsets.UTF_8))
                .setKeys(str("key-prefix", "k") + i);
        String tag = opts.get("tag");
        if (tag != null) {
            b.setTag(tag);
        }
        String props = opts.get("props");
        if (props != null && !props.isEmpty()) {
            for (String kv : props.split(",")) {
                int eq = kv.indexOf('=');
                b.addProperty(kv.substring(0, eq), kv.substring(eq + 1));
            }
        }
        b.addProperty("seq", Integer.toString(i));
        if (kind.equals("fifo")) {
            b.setMessageGroup(str("group-prefix", "g") + (i % num("groups", 1)));
        }
        if (kind.equals("delay")) {
            b.setDeliveryTimestamp(deliverAt);
        }
        return b.build();
    }

    private void produce() throws Exception {
        int count = num("count", 1);
        String tx = str("tx", "none");
        String check = str("check", "commit");
        AtomicInteger checks = new AtomicInteger();
        ProducerBuilder pb = PROVIDER.newProducerBuilder()
                .setClientConfiguration(config())
                .setTopics(str("topic"));
        if (!tx.equals("none")) {
            List<String> rollbackPrefixes = List.of(str("check-rollback-prefix", "").split(","));
            pb.setTransactionChecker(view -> {
                String line = view(view);
                emit("check", line);
                checks.incrementAndGet();
                // Answer from the message, as a real checker does: a server may also check a
                // transaction that was already committed or rolled back (at least once).
                byte[] body = new byte[view.getBody().remaining()];
                view.getBody().duplicate().get(body);
                String text = new String(body, StandardCharsets.UTF_8);
                for (String p : rollbackPrefixes) {
                    if (!p.isEmpty() && text.startsWith(p)) {
                        return TransactionResolution.ROLLBACK;
                    }
                }
                return switch (check) {
                    case "commit" -> TransactionResolution.COMMIT;
                    case "rollback" -> TransactionResolution.ROLLBACK;
                    default -> TransactionResolution.UNKNOWN;
                };
            });
        }
        try (Producer producer = pb.build()) {
            long deliverAt = System.currentTimeMillis() + num("delay-ms", 0);
            int groups = str("kind", "normal").equals("fifo") ? num("groups", 1) : 1;
            int threads = Math.max(1, Math.min(num("threads", groups), count));
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            List<Future<?>> jobs = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final int lane = t;
                jobs.add(pool.submit(() -> {
                    // FIFO: lane t sends the groups g with g % threads == t, each in order.
                    for (int i = 0; i < count; i++) {
                        int key = groups > 1 ? (i % groups) % threads : i % threads;
                        if (key != lane) {
                            continue;
                        }
                        Message m = build(i, deliverAt);
                        SendReceipt r;
                        if (tx.equals("none")) {
                            r = producer.send(m);
                        } else {
                            Transaction t2 = producer.beginTransaction();
                            r = producer.send(m, t2);
                            if (tx.equals("commit")) {
                                t2.commit();
                            } else if (tx.equals("rollback")) {
                                t2.rollback();
                            }
                        }
                        emit("sent", "\"i\":" + i + ",\"id\":" + q(r.getMessageId().toString()));
                    }
                    return null;
                }));
            }
            for (Future<?> f : jobs) {
                f.get();
            }
            pool.shutdown();
            emit("done", "\"sent\":" + count);
            int want = num("check-count", 0);
            long deadline = System.nanoTime() + (long) (secs("check-wait", 0) * 1e9);
            while (checks.get() < want && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            emit("checked", "\"checks\":" + checks.get());
        }
    }

    // -- consume ----------------------------------------------------------------------------

    private void push() throws Exception {
        int count = num("count", 1);
        int failFirst = num("fail-first", 0);
        AtomicInteger seen = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(count);
        try (PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
                .setClientConfiguration(config())
                .setConsumerGroup(str("group"))
                .setSubscriptionExpressions(subscription())
                .setConsumptionThreadCount(num("threads", 20))
                .setMessageListener(m -> {
                    if (failed.get() < failFirst && failed.incrementAndGet() <= failFirst) {
                        emit("failed", view(m));
                        return ConsumeResult.FAILURE;
                    }
                    emit("msg", view(m));
                    seen.incrementAndGet();
                    done.countDown();
                    return ConsumeResult.SUCCESS;
                })
                .build()) {
            emit("ready", "");
            boolean all = done.await((long) (secs("timeout", 60) * 1000), TimeUnit.MILLISECONDS);
            if (all) {
                Thread.sleep((long) (secs("linger", 0) * 1000));
            }
            emit("done", "\"received\":" + seen.get() + ",\"complete\":" + all);
        }
    }

    private void simple() throws Exception {
        int count = num("count", 1);
        int got = 0;
        long deadline = System.nanoTime() + (long) (secs("timeout", 60) * 1e9);
        try (SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(config())
                .setConsumerGroup(str("group"))
                .setSubscriptionExpressions(subscription())
                .setAwaitDuration(Duration.ofMillis((long) (secs("await", 2) * 1000)))
                .build()) {
            emit("ready", "");
            Duration invisible = Duration.ofMillis((long) (secs("invisible", 30) * 1000));
            while (got < count && System.nanoTime() < deadline) {
                for (MessageView m : consumer.receive(num("batch", 16), invisible)) {
                    consumer.ack(m);
                    emit("msg", view(m) + ",\"acked\":true");
                    got++;
                }
            }
            emit("done", "\"received\":" + got + ",\"complete\":" + (got >= count));
        }
    }

    // -- benchmarks -------------------------------------------------------------------------

    // The JIT compiles the client's hot paths only after thousands of calls, and on a busy
    // machine its compiler threads get little CPU: a warm-up of a fixed few seconds left the
    // client interpreted (tens of ms of CPU per send). So each benchmark warms up by work done,
    // then until the JIT is quiet, before its measured span starts.

    /** One warm-up or measured round of a benchmark: runs until the deadline, returns messages. */
    private interface Round {
        long run(long deadlineNanos) throws Exception;
    }

    /** Compilation time of this JVM so far, in ms (0 when the JVM does not report it). */
    private static long jitMillis() {
        var jit = ManagementFactory.getCompilationMXBean();
        return jit != null && jit.isCompilationTimeMonitoringSupported()
                ? jit.getTotalCompilationTime() : 0;
    }

    /** Voluntary + involuntary context switches of every live thread of this JVM. */
    private static long contextSwitches() {
        long total = 0;
        java.io.File[] tasks = new java.io.File("/proc/self/task").listFiles();
        if (tasks == null) {
            return -1;
        }
        for (java.io.File t : tasks) {
            try {
                for (String line : java.nio.file.Files.readAllLines(t.toPath().resolve("status"))) {
                    if (line.startsWith("voluntary_ctxt_switches:")
                            || line.startsWith("nonvoluntary_ctxt_switches:")) {
                        total += Long.parseLong(line.substring(line.indexOf(':') + 1).trim());
                    }
                }
            } catch (java.io.IOException | RuntimeException e) {
                // the thread ended meanwhile
            }
        }
        return total;
    }

    /**
     * Runs 1 s rounds until at least minSeconds and minMsgs messages are done and the JIT
     * compiled for less than 2% of the last round, or --warmup-max seconds passed. Returns the
     * JSON fields describing the warm-up (prefixed with `name`).
     */
    private String warmUp(String name, Round round, long minMsgs, double minSeconds)
            throws Exception {
        double maxSeconds = secs("warmup-max", 90);
        long t0 = System.nanoTime();
        long msgs = 0;
        while (true) {
            long jit0 = jitMillis();
            long r0 = System.nanoTime();
            msgs += round.run(r0 + 1_000_000_000L);
            double roundMs = (System.nanoTime() - r0) / 1e6;
            boolean quiet = jitMillis() - jit0 < 0.02 * roundMs;
            double took = (System.nanoTime() - t0) / 1e9;
            if ((quiet && msgs >= minMsgs && took >= minSeconds) || took >= maxSeconds) {
                return q(name + "_msgs") + ":" + msgs + "," + q(name + "_seconds") + ":" + took
                        + "," + q(name + "_jit_quiet") + ":" + quiet;
            }
        }
    }

    private static void bench(String mode, long msgs, double seconds, double cpu, long switches,
            String warmup) {
        emit("bench", "\"mode\":" + q(mode) + ",\"msgs\":" + msgs + ",\"seconds\":" + seconds
                + ",\"rate\":" + (msgs / seconds) + ",\"cpu_seconds\":" + cpu
                + ",\"context_switches\":" + switches + "," + warmup);
    }

    private void benchSend() throws Exception {
        byte[] body = new byte[num("size", 100)];
        java.util.Arrays.fill(body, (byte) 'x');
        Message m = PROVIDER.newMessageBuilder().setTopic(str("topic")).setBody(body).build();
        String mode = str("mode", "sync");
        int window = num("window", 1000);
        double seconds = secs("seconds", 3);
        try (Producer producer = PROVIDER.newProducerBuilder()
                .setClientConfiguration(config())
                .setTopics(str("topic"))
                .build()) {
            AtomicLong completed = new AtomicLong();
            AtomicReference<Throwable> error = new AtomicReference<>();
            Semaphore inFlight = new Semaphore(window);
            // A round counts the sends that completed during it. Async: sendAsync with at most
            // `window` in flight.
            Round async = deadline -> {
                long before = completed.get();
                while (System.nanoTime() < deadline) {
                    if (error.get() != null) {
                        throw new RuntimeException(error.get());
                    }
                    if (inFlight.tryAcquire(100, TimeUnit.MILLISECONDS)) {
                        producer.sendAsync(m).whenComplete((r, e) -> {
                            if (e != null) {
                                error.compareAndSet(null, e);
                            }
                            completed.incrementAndGet();
                            inFlight.release();
                        });
                    }
                }
                return completed.get() - before;
            };
            Round sync = deadline -> {
                long n = 0;
                while (System.nanoTime() < deadline) {
                    producer.send(m);
                    n++;
                }
                return n;
            };
            // Both modes share the client's send path; the async one drives it through the
            // JIT's thresholds far sooner, so it warms up first in either mode.
            String warm = warmUp("warmup", async, num("warmup-msgs", 20000), 0);
            inFlight.acquire(window);
            inFlight.release(window);
            Round measured = mode.equals("sync") ? sync : async;
            if (mode.equals("sync")) {
                warm += "," + warmUp("warmup_sync", sync, 1000, secs("warmup", 3));
            }
            double cpu0 = cpuSeconds();
            long cs0 = contextSwitches();
            long start = System.nanoTime();
            long msgs = measured.run(start + (long) (seconds * 1e9));
            double took = (System.nanoTime() - start) / 1e9;
            double cpu = cpuSeconds() - cpu0;
            long switches = contextSwitches() - cs0;
            inFlight.acquire(window); // let the tail finish before closing
            warm += ",\"jit_ms\":" + jitMillis();
            bench(mode.equals("sync") ? "sync" : "async-" + window, msgs, took, cpu, switches, warm);
        }
    }

    /**
     * Consumer benchmarks: --warmup-msgs messages are consumed first (the JIT warms up on them),
     * then the measured span runs over the next --count messages; --count + --warmup-msgs
     * messages must be loaded beforehand.
     */
    private void benchPush() throws Exception {
        int count = num("count", 10000);
        int warm = num("warmup-msgs", 20000);
        AtomicInteger seen = new AtomicInteger();
        CountDownLatch warmed = new CountDownLatch(1);
        CountDownLatch done = new CountDownLatch(1);
        AtomicLong last = new AtomicLong();
        long t0 = System.nanoTime();
        try (PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
                .setClientConfiguration(config())
                .setConsumerGroup(str("group"))
                .setSubscriptionExpressions(subscription())
                .setConsumptionThreadCount(num("threads", 20))
                .setMessageListener(m -> {
                    int n = seen.incrementAndGet();
                    if (n == warm) {
                        warmed.countDown();
                    }
                    if (n == warm + count) {
                        last.set(System.nanoTime());
                        done.countDown();
                    }
                    return ConsumeResult.SUCCESS;
                })
                .build()) {
            long timeout = (long) (secs("timeout", 600) * 1000);
            if (warm > 0 && !warmed.await(timeout, TimeUnit.MILLISECONDS)) {
                throw new RuntimeException("warm-up: consumed " + seen.get() + " of " + warm);
            }
            long start = System.nanoTime();
            int base = seen.get();
            double cpu0 = cpuSeconds();
            long cs0 = contextSwitches();
            String warmup = "\"warmup_msgs\":" + base + ",\"warmup_seconds\":"
                    + (start - t0) / 1e9 + ",\"jit_ms\":" + jitMillis();
            if (!done.await(timeout, TimeUnit.MILLISECONDS)) {
                throw new RuntimeException("consumed " + seen.get() + " of " + (warm + count));
            }
            double cpu = cpuSeconds() - cpu0;
            long switches = contextSwitches() - cs0;
            bench("push", warm + count - base, (last.get() - start) / 1e9, cpu, switches, warmup);
        }
    }

    private void benchSimple() throws Exception {
        int count = num("count", 10000);
        int warm = num("warmup-msgs", 20000);
        int batch = num("batch", 32);
        boolean ackAsync = str("ack", "each").equals("async");
        long t0 = System.nanoTime();
        long deadline = t0 + (long) (secs("timeout", 600) * 1e9);
        try (SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(config())
                .setConsumerGroup(str("group"))
                .setSubscriptionExpressions(subscription())
                .setAwaitDuration(Duration.ofSeconds(2))
                .build()) {
            Duration invisible = Duration.ofSeconds(60);
            int got = 0;
            double cpu0 = 0;
            long cs0 = 0;
            long start = 0;
            int base = 0;
            String warmup = "";
            while (got < warm + count) {
                if (start == 0 && got >= warm) {
                    start = System.nanoTime();
                    base = got;
                    cpu0 = cpuSeconds();
                    cs0 = contextSwitches();
                    warmup = "\"warmup_msgs\":" + got + ",\"warmup_seconds\":"
                            + (start - t0) / 1e9 + ",\"jit_ms\":" + jitMillis();
                }
                if (System.nanoTime() > deadline) {
                    throw new RuntimeException("consumed " + got + " of " + (warm + count));
                }
                List<MessageView> received = consumer.receive(batch, invisible);
                if (ackAsync) {
                    List<CompletableFuture<Void>> acks = new ArrayList<>(received.size());
                    for (MessageView m : received) {
                        acks.add(consumer.ackAsync(m));
                    }
                    CompletableFuture.allOf(acks.toArray(new CompletableFuture[0])).join();
                    got += received.size();
                    continue;
                }
                for (MessageView m : received) {
                    consumer.ack(m);
                    got++;
                }
            }
            double took = (System.nanoTime() - start) / 1e9;
            bench("simple", got - base, took, cpuSeconds() - cpu0, contextSwitches() - cs0, warmup);
        }
    }
}
