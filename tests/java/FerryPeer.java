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
//                [--warmup S] [--seconds S]
//   bench-push   --endpoints E --topic T --group G --count N [--size B] [--threads K]
//   bench-simple --endpoints E --topic T --group G --count N [--batch B]
//       throughput: one "bench" line with msgs, seconds, rate (msg/s) and cpu_seconds (this
//       process, over the measured span). bench-push / bench-simple consume N messages loaded
//       beforehand; the span runs from the consumer's start to the N-th message.

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

    private static void bench(String mode, long msgs, double seconds, double cpu) {
        emit("bench", "\"mode\":" + q(mode) + ",\"msgs\":" + msgs + ",\"seconds\":" + seconds
                + ",\"rate\":" + (msgs / seconds) + ",\"cpu_seconds\":" + cpu);
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

    private void benchSend() throws Exception {
        byte[] body = new byte[num("size", 100)];
        java.util.Arrays.fill(body, (byte) 'x');
        Message m = PROVIDER.newMessageBuilder().setTopic(str("topic")).setBody(body).build();
        String mode = str("mode", "sync");
        int window = num("window", 1000);
        double warmup = secs("warmup", 1);
        double seconds = secs("seconds", 3);
        try (Producer producer = PROVIDER.newProducerBuilder()
                .setClientConfiguration(config())
                .setTopics(str("topic"))
                .build()) {
            AtomicLong completed = new AtomicLong();
            AtomicReference<Throwable> error = new AtomicReference<>();
            Semaphore inFlight = new Semaphore(window);
            long t0 = System.nanoTime();
            long measureFrom = t0 + (long) (warmup * 1e9);
            long end = measureFrom + (long) (seconds * 1e9);
            long base = -1;
            double cpu0 = 0;
            long start = 0;
            while (true) {
                long now = System.nanoTime();
                if (base < 0 && now >= measureFrom) {
                    base = completed.get();
                    cpu0 = cpuSeconds();
                    start = now;
                }
                if (now >= end) {
                    break;
                }
                if (error.get() != null) {
                    throw new RuntimeException(error.get());
                }
                if (mode.equals("sync")) {
                    producer.send(m);
                    completed.incrementAndGet();
                } else {
                    if (!inFlight.tryAcquire(100, TimeUnit.MILLISECONDS)) {
                        continue;
                    }
                    producer.sendAsync(m).whenComplete((r, e) -> {
                        if (e != null) {
                            error.compareAndSet(null, e);
                        }
                        completed.incrementAndGet();
                        inFlight.release();
                    });
                }
            }
            long msgs = completed.get() - base;
            double took = (System.nanoTime() - start) / 1e9;
            double cpu = cpuSeconds() - cpu0;
            inFlight.acquire(window); // let the tail finish before closing
            bench(mode.equals("sync") ? "sync" : "async-" + window, msgs, took, cpu);
        }
    }

    private void benchPush() throws Exception {
        int count = num("count", 10000);
        AtomicInteger seen = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(1);
        AtomicLong last = new AtomicLong();
        double cpu0 = cpuSeconds();
        long t0 = System.nanoTime();
        try (PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
                .setClientConfiguration(config())
                .setConsumerGroup(str("group"))
                .setSubscriptionExpressions(subscription())
                .setConsumptionThreadCount(num("threads", 20))
                .setMessageListener(m -> {
                    if (seen.incrementAndGet() == count) {
                        last.set(System.nanoTime());
                        done.countDown();
                    }
                    return ConsumeResult.SUCCESS;
                })
                .build()) {
            if (!done.await((long) (secs("timeout", 600) * 1000), TimeUnit.MILLISECONDS)) {
                throw new RuntimeException("consumed " + seen.get() + " of " + count);
            }
            double cpu = cpuSeconds() - cpu0;
            bench("push", count, (last.get() - t0) / 1e9, cpu);
        }
    }

    private void benchSimple() throws Exception {
        int count = num("count", 10000);
        int got = 0;
        double cpu0 = cpuSeconds();
        long t0 = System.nanoTime();
        long deadline = t0 + (long) (secs("timeout", 600) * 1e9);
        try (SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(config())
                .setConsumerGroup(str("group"))
                .setSubscriptionExpressions(subscription())
                .setAwaitDuration(Duration.ofSeconds(2))
                .build()) {
            Duration invisible = Duration.ofSeconds(60);
            while (got < count) {
                if (System.nanoTime() > deadline) {
                    throw new RuntimeException("consumed " + got + " of " + count);
                }
                for (MessageView m : consumer.receive(num("batch", 32), invisible)) {
                    consumer.ack(m);
                    got++;
                }
            }
            double took = (System.nanoTime() - t0) / 1e9;
            bench("simple", got, took, cpuSeconds() - cpu0);
        }
    }
}
