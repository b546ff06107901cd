// Creates topics and consumer groups on the test broker in one short-lived JVM.
//
// Used by scripts/rocketmq-server; it is what `mqadmin updateTopic -b <broker> -a +message.type=T`
// and `mqadmin updateSubGroup -b <broker> [-o true] [-r N] [-p JSON]` do (same DefaultMQAdminExt
// calls), minus their cost: every MQAdminStartup sub-command starts and shuts down its own admin
// client (~1.5 s each, plus ~3 s of JVM wind-down) and exits 0 even when it failed.
//
// Usage:
//   java -cp <dir of this class>:<rocketmq classpath> FerryAdmin NAMESRV BROKER_ADDR DEADLINE_MS op...
// ops (applied in order; a failed op is retried every 500 ms until the deadline):
//   topic NAME TYPE QUEUES          TYPE: NORMAL FIFO DELAY TRANSACTION (topic attribute message.type)
//   group NAME FIFO RETRY_MAX POLICY  FIFO: true|false; RETRY_MAX: -1 keeps the default (16);
//                                   POLICY: GroupRetryPolicy JSON or "-"
//   route NAME                      wait until the name server returns a route for NAME, so a later
//                                   gRPC QueryRoute cannot cache TOPIC_NOT_FOUND
//   user NAME TYPE                  create (or update) an ACL 2.0 user; TYPE: Super|Normal; the
//                                   password is read from the environment variable
//                                   FERRYMQ_PASSWORD_<NAME upper-cased, other than A-Z0-9 as _>
//   acl NAME RESOURCES ACTIONS DECISION
//                                   grant (merge) a policy to user NAME: RESOURCES and ACTIONS are
//                                   comma-separated (Topic:orders,Group:*  Pub,Sub), DECISION Allow|Deny
//
// With FERRYMQ_ADMIN_ACCESS_KEY and FERRYMQ_ADMIN_SECRET_KEY in the environment every request is
// signed with that user (a broker with ACL 2.0 authentication); TLS comes from the -Dtls.* system
// properties of the JVM (TlsSystemConfig).
//
// Why routes can lag: the broker's first full registration with the name server only happens 10 s
// after boot (the registration in BrokerController.start() finds no "available" name server yet,
// because the client's availability scan connects asynchronously), and until then the name server
// rejects the broker's per-topic registrations ("Can't register topicConfigWrapper"). While a route
// is missing we therefore nudge the broker with updateBrokerConfig(brokerPermission=6), its default:
// the broker answers that by re-registering everything at once. (Side effect: the broker rewrites
// its -c file, conf/broker.conf, with every setting; scripts/rocketmq-server regenerates it on start.)
// Exit status 0 when every op succeeded, 1 otherwise.
import com.alibaba.fastjson.JSON;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.remoting.protocol.body.UserInfo;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.remoting.protocol.subscription.GroupRetryPolicy;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class FerryAdmin {
    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: FerryAdmin NAMESRV BROKER_ADDR DEADLINE_MS op...");
            System.exit(2);
        }
        String namesrv = args[0];
        String broker = args[1];
        long deadline = System.currentTimeMillis() + Long.parseLong(args[2]);
        List<String[]> ops = new ArrayList<>();
        for (int i = 3; i < args.length; ) {
            int arity;
            switch (args[i]) {
                case "topic": arity = 4; break;
                case "group": arity = 5; break;
                case "route": arity = 2; break;
                case "user": arity = 3; break;
                case "acl": arity = 5; break;
                default:
                    System.err.println("unknown op: " + args[i]);
                    System.exit(2);
                    return;
            }
            if (i + arity > args.length) {
                System.err.println("missing arguments for op " + args[i]);
                System.exit(2);
            }
            String[] op = new String[arity];
            System.arraycopy(args, i, op, 0, arity);
            ops.add(op);
            i += arity;
        }

        String accessKey = System.getenv("FERRYMQ_ADMIN_ACCESS_KEY");
        String secretKey = System.getenv("FERRYMQ_ADMIN_SECRET_KEY");
        DefaultMQAdminExt admin = accessKey != null && secretKey != null
            ? new DefaultMQAdminExt(new AclClientRPCHook(new SessionCredentials(accessKey, secretKey)), 5000)
            : new DefaultMQAdminExt(5000);
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("ferrymq-admin-" + ProcessHandle.current().pid());
        admin.start();

        List<String[]> pending = ops;
        long lastNudge = 0;
        while (true) {
            List<String[]> failed = new ArrayList<>();
            for (String[] op : pending) {
                // Once one op fails, keep later ops for the next round: routes depend on topics.
                if (!failed.isEmpty()) {
                    failed.add(op);
                    continue;
                }
                try {
                    System.out.println(run(admin, broker, op));
                } catch (Exception e) {
                    System.out.println("RETRY " + String.join(" ", op) + ": " + firstLine(e));
                    failed.add(op);
                    if (op[0].equals("route") && System.currentTimeMillis() - lastNudge >= 1000) {
                        lastNudge = System.currentTimeMillis();
                        try {
                            Properties properties = new Properties();
                            properties.setProperty("brokerPermission", "6");
                            admin.updateBrokerConfig(broker, properties);
                            System.out.println("nudged broker " + broker + " to register with the name server");
                        } catch (Exception nudgeError) {
                            System.out.println("nudge failed: " + firstLine(nudgeError));
                        }
                    }
                }
            }
            if (failed.isEmpty()) {
                System.out.flush();
                // No admin.shutdown(): it only winds down client threads, which costs seconds.
                Runtime.getRuntime().halt(0);
            }
            if (System.currentTimeMillis() + 500 > deadline) {
                System.out.println("FAILED " + failed.size() + " op(s), first: " + String.join(" ", failed.get(0)));
                System.out.flush();
                Runtime.getRuntime().halt(1);
            }
            Thread.sleep(500);
            pending = failed;
        }
    }

    private static String run(DefaultMQAdminExt admin, String broker, String[] op) throws Exception {
        switch (op[0]) {
            case "topic": {
                int queues = Integer.parseInt(op[3]);
                TopicConfig config = new TopicConfig(op[1], queues, queues, PermName.PERM_READ | PermName.PERM_WRITE);
                Map<String, String> attributes = new HashMap<>();
                attributes.put("+message.type", op[2]);
                config.setAttributes(attributes);
                admin.createAndUpdateTopicConfig(broker, config);
                return "OK topic " + op[1] + " message.type=" + op[2] + " queues=" + queues;
            }
            case "group": {
                SubscriptionGroupConfig config = new SubscriptionGroupConfig();
                config.setGroupName(op[1]);
                config.setConsumeMessageOrderly(Boolean.parseBoolean(op[2]));
                int retryMax = Integer.parseInt(op[3]);
                if (retryMax >= 0) {
                    config.setRetryMaxTimes(retryMax);
                }
                if (!op[4].equals("-")) {
                    config.setGroupRetryPolicy(JSON.parseObject(op[4], GroupRetryPolicy.class));
                }
                admin.createAndUpdateSubscriptionGroupConfig(broker, config);
                return "OK group " + op[1] + " consumeMessageOrderly=" + config.isConsumeMessageOrderly()
                    + " retryMaxTimes=" + config.getRetryMaxTimes();
            }
            case "route": {
                TopicRouteData route = admin.examineTopicRouteInfo(op[1]);
                if (route == null || route.getQueueDatas() == null || route.getQueueDatas().isEmpty()) {
                    throw new IllegalStateException("no queue data yet");
                }
                return "OK route " + op[1] + " " + route.getQueueDatas();
            }
            case "user": {
                String variable = "FERRYMQ_PASSWORD_" + op[1].toUpperCase().replaceAll("[^A-Z0-9]", "_");
                String password = System.getenv(variable);
                if (password == null || password.isEmpty()) {
                    throw new IllegalArgumentException("no password in " + variable);
                }
                UserInfo existing = null;
                try {
                    existing = admin.getUser(broker, op[1]);
                } catch (Exception notFound) {
                    // created below
                }
                if (existing == null || existing.getUsername() == null) {
                    admin.createUser(broker, op[1], password, op[2]);
                    return "OK user " + op[1] + " created (" + op[2] + ")";
                }
                admin.updateUser(broker, op[1], password, op[2], "enable");
                return "OK user " + op[1] + " updated (" + op[2] + ")";
            }
            case "acl": {
                admin.createAcl(broker, "User:" + op[1], Arrays.asList(op[2].split(",")),
                    Arrays.asList(op[3].split(",")), null, op[4]);
                return "OK acl User:" + op[1] + " " + op[2] + " " + op[3] + " " + op[4];
            }
            default:
                throw new IllegalArgumentException(op[0]);
        }
    }

    private static String firstLine(Throwable e) {
        String message = String.valueOf(e.getMessage());
        int newline = message.indexOf('\n');
        return e.getClass().getSimpleName() + ": " + (newline < 0 ? message : message.substring(0, newline));
    }
}
