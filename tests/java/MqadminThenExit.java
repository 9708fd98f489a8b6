import java.lang.reflect.InvocationTargetException;

/**
 * Runs mqadmin ({@code org.apache.rocketmq.tools.command.MQAdminStartup.main}) with the given arguments, then
 * ends the JVM at once with mqadmin's own outcome: 0 when main returns, 1 when it throws (what the JVM does
 * for an uncaught exception); a {@code System.exit} inside mqadmin ends it as before.
 *
 * Why: after mqadmin's command has printed everything and shut its admin client down, the JVM still waits for
 * the client's Netty event-loop threads, which NettyRemotingClient.shutdown ends with Netty's graceful shutdown
 * (a 2 s quiet period): 2-3 s of every mqadmin call in the tests were that wait. Reflection keeps this
 * class free of any RocketMQ API, so it builds once without a classpath and runs against 4.9.x and 5.x alike.
 */
public final class MqadminThenExit {
    private MqadminThenExit() {
    }

    public static void main(String[] args) {
        int code = 0;
        try {
            Class.forName("org.apache.rocketmq.tools.command.MQAdminStartup")
                .getMethod("main", String[].class).invoke(null, (Object) args);
        } catch (InvocationTargetException e) {
            e.getCause().printStackTrace();
            code = 1;
        } catch (ReflectiveOperationException e) {
            e.printStackTrace();
            code = 1;
        }
        System.out.flush();
        System.err.flush();
        System.exit(code);
    }
}
