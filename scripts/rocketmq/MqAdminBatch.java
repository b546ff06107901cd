// Runs several mqadmin sub-commands in one JVM, then exits at once.
//
// Used by scripts/rocketmq-server: a plain `MQAdminStartup` run spends ~3 s after its work waiting
// for non-daemon client threads to wind down, and a JVM start per command adds up on 2 cores.
//
// Arguments are mqadmin command lines separated by a lone "--", e.g.
//   java -cp <classpath> MqAdminBatch.java updateTopic -n ... -t a -- updateSubGroup -n ... -g g
// MQAdminStartup.main0 prints failures instead of throwing, so the caller checks stdout for
// "success" per command; this program only adds "=== <command>" separators to make that easy.
import java.util.ArrayList;
import java.util.List;

public class MqAdminBatch {
    public static void main(String[] args) {
        List<List<String>> commands = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (String arg : args) {
            if (arg.equals("--")) {
                if (!current.isEmpty()) {
                    commands.add(current);
                }
                current = new ArrayList<>();
            } else {
                current.add(arg);
            }
        }
        if (!current.isEmpty()) {
            commands.add(current);
        }
        for (List<String> command : commands) {
            System.out.println("=== " + String.join(" ", command));
            System.out.flush();
            org.apache.rocketmq.tools.command.MQAdminStartup.main0(command.toArray(new String[0]), null);
            System.out.flush();
        }
        System.exit(0);
    }
}
