// Runs several mqadmin sub-commands in one JVM, retrying failed ones, then exits at once.
//
// Used by scripts/rocketmq-server. A plain `MQAdminStartup` run spends ~3 s after its work waiting
// for non-daemon client threads to wind down, and it exits 0 even when the command failed (main0
// prints the exception and returns), so one JVM per command is both slow and hard to check.
//
// Usage:
//   java -cp <rocketmq classpath>:<dir of this class> MqAdminBatch [--deadline-ms N] \
//       updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t a -- topicRoute -n ... -t a -- ...
//
// Commands are separated by a lone "--" and run in order through MQAdminStartup.main0. A command
// counts as failed if it printed an exception, or if its output lacks the command's success marker
// (updateTopic/updateSubGroup print "... success.", topicRoute prints the route JSON). Failed
// commands are retried, in order, every 500 ms until --deadline-ms (default 0: no retry) passes.
// Output is echoed with a "=== <command>" header per attempt. Exit status: 0 when every command
// succeeded, 1 otherwise.
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.rocketmq.tools.command.MQAdminStartup;

public class MqAdminBatch {
    public static void main(String[] args) throws Exception {
        long deadlineMs = 0;
        List<List<String>> commands = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (commands.isEmpty() && current.isEmpty() && args[i].equals("--deadline-ms")) {
                deadlineMs = Long.parseLong(args[++i]);
            } else if (args[i].equals("--")) {
                if (!current.isEmpty()) {
                    commands.add(current);
                }
                current = new ArrayList<>();
            } else {
                current.add(args[i]);
            }
        }
        if (!current.isEmpty()) {
            commands.add(current);
        }

        long deadline = System.currentTimeMillis() + deadlineMs;
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        List<List<String>> pending = commands;
        while (true) {
            List<List<String>> failed = new ArrayList<>();
            for (List<String> command : pending) {
                ByteArrayOutputStream outBuf = new ByteArrayOutputStream();
                ByteArrayOutputStream errBuf = new ByteArrayOutputStream();
                System.setOut(new PrintStream(outBuf, true, StandardCharsets.UTF_8));
                System.setErr(new PrintStream(errBuf, true, StandardCharsets.UTF_8));
                try {
                    MQAdminStartup.main0(command.toArray(new String[0]), null);
                } catch (Throwable t) {
                    t.printStackTrace();
                } finally {
                    System.out.flush();
                    System.err.flush();
                    System.setOut(realOut);
                    System.setErr(realErr);
                }
                String out = outBuf.toString(StandardCharsets.UTF_8);
                String err = errBuf.toString(StandardCharsets.UTF_8);
                boolean ok = succeeded(command.get(0), out, err);
                realOut.println("=== " + String.join(" ", command) + (ok ? "" : "   [FAILED]"));
                realOut.print(out);
                if (!out.isEmpty() && !out.endsWith("\n")) {
                    realOut.println();
                }
                realOut.print(err);
                realOut.flush();
                if (!ok) {
                    failed.add(command);
                }
            }
            if (failed.isEmpty()) {
                System.exit(0);
            }
            if (System.currentTimeMillis() + 500 > deadline) {
                realOut.println("=== " + failed.size() + " command(s) failed");
                realOut.flush();
                System.exit(1);
            }
            Thread.sleep(500);
            pending = failed;
        }
    }

    private static boolean succeeded(String command, String out, String err) {
        if (err.contains("Exception") || out.contains("Exception")) {
            return false;
        }
        switch (command.toLowerCase()) {
            case "updatetopic":
            case "updatesubgroup":
                return out.contains("success");
            case "topicroute":
                return out.contains("brokerDatas");
            default:
                return true;
        }
    }
}
