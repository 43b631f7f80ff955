import com.sun.tools.attach.VirtualMachine;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class BrokerRequests {
    public static void main(String[] args) throws Exception {
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String addr = vm.startLocalManagementAgent();
        vm.detach();
        try (JMXConnector c = JMXConnectorFactory.connect(new JMXServiceURL(addr))) {
            MBeanServerConnection s = c.getMBeanServerConnection();
            for (ObjectName n : s.queryNames(new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*"), null)) {
                System.out.println(n.getKeyProperty("request") + " " + n.getKeyProperty("version") + " " + s.getAttribute(n, "Count"));
            }
        }
    }
}
